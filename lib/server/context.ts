// What every route is given: the engine, the tokenizer, the metrics and the settings.
import type { ServeConfig } from '../config/schema.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import type { Engine } from './engine_port.js';
import type { ServerMetrics } from './metrics.js';

export interface ServerContext {
  engine: Engine;
  tokenizer: Tokenizer;
  metrics: ServerMetrics;
  config: ServeConfig;
  /** The name clients must put in `model`. */
  modelName: string;
  /** MSTAR_TRACE: takes each streamed request's first-token trace line (trace.ts). */
  trace?: (line: string) => void;
}
