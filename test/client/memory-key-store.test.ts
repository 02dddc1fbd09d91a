import { memoryKeyStore } from '../../src/client/index.js'
import { keyStoreContract } from './key-store-contract.js'

keyStoreContract('memoryKeyStore', async () => {
  const store = memoryKeyStore()
  return { store, sameStore: () => store }
})
