// NestJS (on Express): charge a card once, however often the request is retried.
// Decorators need "experimentalDecorators": true in tsconfig.json, as in every NestJS app.
import { Body, Controller, Module, Post, UseInterceptors } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import pg from 'pg'
import { createEngine } from 'oncely'
import { Idempotency, IdempotencyInterceptor, IdempotencyModule, type IdempotencyContext } from 'oncely/nestjs'
import { createPostgresStore, migrate, type Queryable } from 'oncely/postgres'
import { chargeTwiceThenChangeTheAmount, fakeProvider } from './support/demo.js'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
const schema = process.env.ONCELY_SCHEMA ?? 'oncely'
await migrate({ pool, schema })
await pool.query('CREATE TABLE IF NOT EXISTS charges (id text PRIMARY KEY, amount integer NOT NULL)')
const engine = createEngine({ store: createPostgresStore({ pool, schema }) })
const provider = fakeProvider()

@Controller('v1')
class ChargesController {
  @Post('charges')
  @UseInterceptors(IdempotencyInterceptor)
  async charge(@Body() body: { amount: number }, @Idempotency() { execution, writeOnCompletion }: IdempotencyContext<Queryable>) {
    // Runs once per key; the provider gets a key derived from the claim, so it dedupes too.
    const charge = await execution.step('charge', ({ providerKey }) => provider.charge(body.amount, providerKey))
    // Commits in the transaction that stores the response, or not at all.
    writeOnCompletion(async (tx) => {
      await tx.query({ text: 'INSERT INTO charges (id, amount) VALUES ($1, $2)', values: [charge.id, charge.amount] })
    })
    return charge
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ engine, scope: (req) => req.get('x-user-id') })],
  controllers: [ChargesController],
})
class AppModule {}

const app = await NestFactory.create(AppModule, { logger: false })
await app.listen(0, '127.0.0.1')
await chargeTwiceThenChangeTheAmount(await app.getUrl())
// 201 {"id":"ch_1","amount":1000}
// 201 (replayed) {"id":"ch_1","amount":1000}
// 422 https://oncely.dev/problems/idempotency-key-reused
console.log(`provider charges: ${provider.count}, rows: ${(await pool.query('SELECT id FROM charges')).rowCount}`) // provider charges: 1, rows: 1
await app.close()
await pool.end()
