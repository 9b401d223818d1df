// Messages between the HTTP thread (client.ts) and the engine thread (worker.ts).
import type { EngineOptions } from './options.js';
import type { EngineStats, GenerateRequest, ModelInfo, RequestOutput } from './types.js';

export interface AdapterInfo {
  name: string;
  path: string;
}

export type ToEngine =
  | { type: 'add'; request: GenerateRequest }
  | { type: 'abort'; id: string }
  | { type: 'loadAdapter'; call: number; name: string; path: string }
  | { type: 'unloadAdapter'; call: number; name: string }
  | { type: 'close' };

export type FromEngine =
  | { type: 'progress'; message: string }
  | { type: 'ready'; info: ModelInfo; stats: EngineStats; adapters: AdapterInfo[] }
  | { type: 'adapterResult'; call: number; error?: string; found?: boolean; adapters: AdapterInfo[]; stats?: EngineStats }
  | { type: 'outputs'; outputs: RequestOutput[]; stats: EngineStats }
  | { type: 'rejected'; id: string; message: string }
  /** config: the options ask for what cannot be met (LimitsError), so the config is at fault. */
  | { type: 'fatal'; message: string; config?: boolean };

export type WorkerInit = Omit<EngineOptions, 'onProgress'>;
