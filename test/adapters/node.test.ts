import { conformanceSuite } from './conformance.js'
import { nodeHarness } from './harnesses/node.js'

conformanceSuite(nodeHarness)
