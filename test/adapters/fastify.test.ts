import { conformanceSuite } from './conformance.js'
import { fastifyHarness } from './harnesses/fastify.js'

conformanceSuite(fastifyHarness)
