const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec']
const DAY = '(?:mon|tue|wed|thu|fri|sat|sun)'
const LONG_DAY = '(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)'
const MONTH = '(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)'
const TIME = '(\\d{2}):(\\d{2}):(\\d{2})'

/** `Sun, 06 Nov 1994 08:49:37 GMT` */
const IMF_FIXDATE = new RegExp(`^${DAY}, (\\d{2}) ${MONTH} (\\d{4}) ${TIME} GMT$`, 'i')
/** `Sunday, 06-Nov-94 08:49:37 GMT` (obsolete RFC 850) */
const RFC_850 = new RegExp(`^${LONG_DAY}, (\\d{2})-${MONTH}-(\\d{2}) ${TIME} GMT$`, 'i')
/** `Sun Nov  6 08:49:37 1994` (obsolete C asctime) */
const ASCTIME = new RegExp(`^${DAY} ${MONTH} ([ \\d]\\d) ${TIME} (\\d{4})$`, 'i')

/**
 * Parses an HTTP date in the three forms RFC 9110 §5.6.7 says a recipient must accept:
 * IMF-fixdate, and the obsolete RFC 850 and asctime forms. Returns milliseconds since the epoch,
 * or `undefined` for anything else (including an impossible date such as 31 Feb).
 */
export function parseHttpDate(text: string, now: number = Date.now()): number | undefined {
  let match = IMF_FIXDATE.exec(text)
  if (match) return toTime(Number(match[3]), match[2], match[1], match[4], match[5], match[6])
  match = RFC_850.exec(text)
  if (match) return toTime(fullYear(Number(match[3]), now), match[2], match[1], match[4], match[5], match[6])
  match = ASCTIME.exec(text)
  if (match) return toTime(Number(match[6]), match[1], match[2], match[3], match[4], match[5])
  return undefined
}

/**
 * RFC 9110 §5.6.7: a two-digit year that would be more than 50 years in the future is the most
 * recent past year with the same last two digits.
 */
function fullYear(twoDigits: number, now: number): number {
  const thisYear = new Date(now).getUTCFullYear()
  let year = Math.floor(thisYear / 100) * 100 + twoDigits
  if (year > thisYear + 50) year -= 100
  return year
}

function toTime(year: number, month: string | undefined, day: string | undefined, hours: string | undefined, minutes: string | undefined, seconds: string | undefined): number | undefined {
  const monthIndex = MONTHS.indexOf(String(month).toLowerCase())
  const [d, h, m, s] = [day, hours, minutes, seconds].map((part) => Number(String(part).trim()))
  if (monthIndex < 0 || d === undefined || h === undefined || m === undefined || s === undefined) return undefined
  if (h > 23 || m > 59 || s > 60) return undefined
  // A leap second (:60) is read as the next second's start.
  const time = Date.UTC(year, monthIndex, d, h, m, Math.min(s, 59)) + (s === 60 ? 1000 : 0)
  return new Date(Date.UTC(year, monthIndex, d)).getUTCDate() === d ? time : undefined
}
