import { conformanceSuite } from './conformance.js'
import { expressHarness } from './harnesses/express.js'

conformanceSuite(expressHarness)
