import { conformanceSuite } from './conformance.js'
import { honoHarness } from './harnesses/hono.js'

conformanceSuite(honoHarness)
