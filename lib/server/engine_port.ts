// What the HTTP layer needs from the engine. The real EngineClient (lib/engine/client.ts)
// and the tests' fake both satisfy it, so routes never depend on the worker machinery.
import type { EngineStats, GenerateRequest, ModelInfo, RequestOutput } from '../engine/types.js';

export interface Engine {
  readonly info: ModelInfo;
  /** Yields once per engine step; the last output carries finishReason. */
  generate(req: GenerateRequest): AsyncIterable<RequestOutput>;
  /** Ends the request; its iterable then finishes with finishReason 'abort'. */
  abort(id: string): void;
  /** Latest counters, read synchronously at scrape time. */
  stats(): EngineStats;
  /** False once the engine has died: /health then fails so an orchestrator restarts us. */
  healthy?(): boolean;
  /** LoRA adapters requests may name; absent or empty when LoRA is off. */
  adapters?(): { name: string; path: string }[];
  loadAdapter?(name: string, path: string): Promise<void>;
  unloadAdapter?(name: string): Promise<boolean>;
}
