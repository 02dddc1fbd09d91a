import { fail, judge, skip, type Check } from '../check.js'
import { executionProblems, executionsText, type CheckContext } from '../context.js'
import { startCutProxy, type CutMode } from '../proxy.js'
import { requestBytes, sendRawAndWaitForClose } from '../raw-request.js'
import { describe, isReplayed, isSuccess } from '../received.js'

/** The template sent through the kit's proxy and cut there, then retried with the same key. */
async function cutThenRetry(context: CheckContext, mode: CutMode) {
  const { url, probe } = context.options
  if (url.protocol !== 'http:') return skip("needs an http:// URL: the kit's proxy cuts plain TCP and cannot tell where a TLS request ends")
  if (mode === 'before-response' && probe === undefined) return skip('needs --probe: after a cut before any answer byte, only a count tells one execution from two')
  const expected =
    mode === 'before-response'
      ? 'the retry (after any 409s) a 2xx: the replay, or the one execution when the first never ran; 1 execution'
      : 'the retry (after any 409s) the replay, marked Idempotent-Replayed; 1 execution'
  const proxy = await startCutProxy(url.hostname.replace(/^\[|\]$/g, ''), Number(url.port || 80))
  try {
    const key = context.newKey()
    const { value, executions } = await context.counted(key, async () => {
      const bytes = requestBytes(context.request({ label: `the template through the kit's proxy, cut ${mode === 'before-response' ? 'once the request is through, before any answer byte' : 'after the first answer byte'}`, key }))
      const report = proxy.cutNext(mode, bytes.length)
      await sendRawAndWaitForClose(proxy.port, bytes, context.options.timeoutMs)
      const cut = await report
      if (!cut.cut) return { cut, retry: undefined }
      return { cut, retry: await context.sendUntilSettled({ label: 'the template again, directly, same key', key }) }
    })
    if (value.retry === undefined) return fail(expected, value.cut.detail, `the connection could not be cut where asked: ${value.cut.detail}`)
    const { answer, conflicts } = value.retry
    const problems = [
      ...(isSuccess(answer) ? [] : [`the retry's final answer is ${describe(answer)}, not a 2xx`]),
      ...(mode === 'after-first-byte' && !isReplayed(answer) ? ['the retry is not marked Idempotent-Replayed, though the first request was answered'] : []),
      ...executionProblems(executions, 1),
    ]
    return judge(expected, `${value.cut.detail}; retry ${describe(answer)} after ${conflicts} × 409; ${executionsText(executions)}`, problems)
  } finally {
    await proxy.close()
  }
}

export const cutBeforeResponse: Check = {
  id: 'cut-before-response',
  title: 'a request cut once sent, before any answer, then retried: one execution',
  run: (context) => cutThenRetry(context, 'before-response'),
}

export const cutAfterFirstByte: Check = {
  id: 'cut-after-first-byte',
  title: 'a request cut after the first answer byte, then retried: the replay',
  run: (context) => cutThenRetry(context, 'after-first-byte'),
}
