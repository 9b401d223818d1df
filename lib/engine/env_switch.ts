// Boolean switches from the environment (MSTAR_PROFILE, MSTAR_TRACE, ...), in a module of
// their own so that a process that only reads one (the bench's client) loads nothing else.
const OFF = ['0', 'false', 'off', 'no'];
const ON = ['1', 'true', 'on', 'yes'];

/** A boolean switch from the environment: undefined when unset or empty; throws on anything else unclear. */
export function envSwitch(name: string, env: NodeJS.ProcessEnv): boolean | undefined {
  const raw = env[name]?.trim().toLowerCase();
  if (!raw) return undefined;
  if (OFF.includes(raw)) return false;
  if (ON.includes(raw)) return true;
  throw new Error(`${name}=${env[name]} is not understood: use 1 or 0`);
}
