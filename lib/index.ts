// The package's public entry: start an engine, build the HTTP app around it, or use the
// pieces (config, tokenizer, checkpoints) on their own.
export { EngineClient, type EngineOptions, type AdapterInfo } from './engine/client.js';
export type { GenerateRequest, RequestOutput, SamplingParams, EngineStats, ModelInfo } from './engine/types.js';
export { buildApp, type AppOptions } from './server/app.js';
export { loadServeConfig, ConfigError } from './config/load.js';
export type { ServeConfig } from './config/schema.js';
export { engineOptionsOf } from './config/engine_options.js';
export { Tokenizer } from './tokenizer/tokenizer.js';
export { readModelConfig, type ModelConfig } from './checkpoint/config.js';
export { openCheckpoint } from './checkpoint/checkpoint.js';
export { CheckpointError } from './checkpoint/errors.js';
export { AdapterError } from './lora/errors.js';
