import { conformanceSuite } from './conformance.js'
import { nestHarness } from './harnesses/nestjs.js'

conformanceSuite(nestHarness)
