import { homedir } from 'node:os'
import path from 'node:path'

/**
 * The directory `oncely request` keeps operation keys in when `--key-store` is not given: one
 * per user, whatever the working directory, so the same `--operation` run from two folders sends
 * one key. `$XDG_STATE_HOME/oncely/keys` (XDG Base Directory: state that survives restarts),
 * else `~/.local/state/oncely/keys`; on Windows `%LOCALAPPDATA%\oncely\keys`.
 */
export function defaultKeyStoreDirectory(env: NodeJS.ProcessEnv = process.env, platform: NodeJS.Platform = process.platform, home: string = homedir()): string {
  // The XDG spec ignores a relative path: it would again depend on the working directory.
  const xdg = env['XDG_STATE_HOME']
  if (xdg && path.isAbsolute(xdg)) return path.join(xdg, 'oncely', 'keys')
  const localAppData = env['LOCALAPPDATA']
  if (platform === 'win32' && localAppData && path.isAbsolute(localAppData)) return path.join(localAppData, 'oncely', 'keys')
  return path.join(home, '.local', 'state', 'oncely', 'keys')
}
