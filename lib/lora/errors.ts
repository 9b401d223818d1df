// A refused adapter: the message names the adapter, the file and the key at fault.
export class AdapterError extends Error {
  override name = 'AdapterError';
}
