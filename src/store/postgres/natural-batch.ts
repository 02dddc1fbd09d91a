/**
 * Natural batching (issue 21): a statement for one item leaves at once when none of its kind is
 * in flight; the items that arrive while one is leave together, as one statement, when it
 * answers. Nothing waits on a timer, so a lone request pays nothing, and under load one round
 * trip and one commit serve as many items as arrived during the last one.
 */
export class NaturalBatch<In, Out> {
  readonly #queue: Array<{ input: In; resolve: (output: Out) => void; reject: (error: unknown) => void }> = []
  #inFlight = false

  /**
   * `send` runs one statement for `inputs` and resolves to one output per input, in their order;
   * when it rejects, every input of the batch rejects with the same error.
   */
  constructor(
    private readonly maxSize: number,
    private readonly send: (inputs: In[]) => Promise<Out[]>,
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
    Promise.resolve(batch.map((item) => item.input))
      .then(this.send)
      .then(
        (outputs) => batch.forEach((item, index) => item.resolve(outputs[index] as Out)),
        (error: unknown) => batch.forEach((item) => item.reject(error)),
      )
      .finally(() => {
        this.#inFlight = false
        if (this.#queue.length > 0) this.#sendNext()
      })
  }
}
