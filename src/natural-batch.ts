/**
 * Natural batching (issue 21): a statement for one item leaves at once when none of its kind is
 * in flight; the items that arrive while one is leave together, as one statement, when it
 * answers. Nothing waits on a timer, so a lone request pays nothing, and under load one round
 * trip and one commit serve as many items as arrived during the last one.
 */

/** What one item of a batch met: its answer, or an error of its own. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown }

export class NaturalBatch<In, Out> {
  readonly #queue: Array<{ input: In; resolve: (output: Out) => void; reject: (error: unknown) => void }> = []
  #inFlight = false

  /**
   * `send` runs one statement for `inputs` and resolves to what each input met, in their order;
   * when it rejects, every input of the batch rejects with the same error.
   */
  constructor(
    private readonly maxSize: number,
    private readonly send: (inputs: In[]) => Promise<Array<Settled<Out>>>,
  ) {}

  submit(input: In): Promise<Out> {
    return new Promise<Out>((resolve, reject) => {
      this.#queue.push({ input, resolve, reject })
      if (!this.#inFlight) this.#sendNext()
    })
  }

  #sendNext(): void {
    const batch = this.#queue.splice(0, this.maxSize)
    this.#inFlight = true
    // Called through a promise, so a `send` that throws before it returns one rejects the batch.
    void Promise.resolve(batch.map((item) => item.input))
      .then(this.send)
      .then(
        (outcomes) =>
          batch.forEach((item, index) => {
            const outcome = outcomes[index]
            if (outcome?.ok === true) item.resolve(outcome.value)
            else item.reject(outcome === undefined ? new Error('the batch statement gave no answer for this item') : outcome.error)
          }),
        (error: unknown) => batch.forEach((item) => item.reject(error)),
      )
      .finally(() => {
        this.#inFlight = false
        if (this.#queue.length > 0) this.#sendNext()
      })
  }
}

/** Runs `alone` for each input, each settling on its own. */
export function eachAlone<In, Out>(inputs: In[], alone: (input: In) => Promise<Out>): Promise<Array<Settled<Out>>> {
  return Promise.all(
    inputs.map((input) =>
      alone(input).then(
        (value): Settled<Out> => ({ ok: true, value }),
        (error: unknown): Settled<Out> => ({ ok: false, error }),
      ),
    ),
  )
}
