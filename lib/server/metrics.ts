// Prometheus metrics in vLLM's set, with an `mstar:` prefix. Values the engine already
// counts are read from engine.stats() at scrape time; latencies and token totals are
// observed by the routes. Each app gets its own Registry so tests can build many.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

import type { EngineStats, FinishReason } from '../engine/types.js';

// vLLM's bucket boundaries, so dashboards built for it read the same.
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];

export interface FinishedRequest {
  finishReason: FinishReason;
  promptTokens: number;
  generationTokens: number;
  e2eSeconds: number;
}

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly ttft: Histogram;
  private readonly itl: Histogram;
  private readonly e2e: Histogram;
  private readonly promptTokens: Counter;
  private readonly generationTokens: Counter;
  private readonly success: Counter<'finished_reason'>;

  constructor(stats: () => EngineStats, modelName: string) {
    const registers = [this.registry];
    this.registry.setDefaultLabels({ model_name: modelName });

    const gauge = (name: string, help: string, read: (s: EngineStats) => number): void => {
      new Gauge({ name, help, registers, collect() { this.set(read(stats())); } });
    };
    gauge('mstar:num_requests_running', 'Requests in the running batch.', (s) => s.running);
    gauge('mstar:num_requests_waiting', 'Requests waiting to be scheduled.', (s) => s.waiting);
    gauge('mstar:kv_cache_usage_perc', 'Fraction of KV-cache blocks in use (1 = full).',
      (s) => (s.kvBlocksTotal > 0 ? s.kvBlocksUsed / s.kvBlocksTotal : 0));

    // Mirrors of the engine's own running totals: set to its value at each scrape.
    const mirror = (name: string, help: string, read: (s: EngineStats) => number): void => {
      new Counter({ name, help, registers, collect() { this.reset(); this.inc(read(stats())); } });
    };
    mirror('mstar:num_preemptions_total', 'Requests preempted to free KV-cache blocks.', (s) => s.preemptions);
    mirror('mstar:prefix_cache_queries_total', 'Prompt tokens looked up in the prefix cache.', (s) => s.prefixCacheQueries);
    mirror('mstar:prefix_cache_hits_total', 'Prompt tokens found in the prefix cache.', (s) => s.prefixCacheHits);

    // The adapter pool (zero while LoRA is off).
    gauge('mstar:lora_adapters_registered', 'LoRA adapters requests may name.', (s) => s.lora?.registered ?? 0);
    gauge('mstar:lora_adapters_resident', 'LoRA adapters in GPU slots.', (s) => s.lora?.resident ?? 0);
    gauge('mstar:lora_requests_waiting_for_slot', 'Waiting requests whose adapter has no slot yet.', (s) => s.lora?.waitingForSlot ?? 0);
    mirror('mstar:lora_loads_total', 'Adapter loads into a slot.', (s) => s.lora?.loads ?? 0);
    mirror('mstar:lora_evictions_total', 'Adapters evicted from a slot for another.', (s) => s.lora?.evictions ?? 0);
    mirror('mstar:lora_load_seconds_total', 'Host time spent starting adapter copies into slots.', (s) => s.lora?.loadSeconds ?? 0);
    mirror('mstar:lora_slot_turns_total', 'Pinned slots handed to a waiting adapter when a time slice ended.', (s) => s.lora?.turns ?? 0);
    mirror('mstar:lora_merges_total', 'Adapters merged into the weights for steps that ran them alone.', (s) => s.lora?.merges ?? 0);
    mirror('mstar:lora_merged_steps_total', 'Steps run with an adapter merged into the weights.', (s) => s.lora?.mergedSteps ?? 0);

    this.ttft = new Histogram({ name: 'mstar:time_to_first_token_seconds', help: 'Time from request arrival to its first token.', buckets: TTFT_BUCKETS, registers });
    this.itl = new Histogram({ name: 'mstar:inter_token_latency_seconds', help: 'Time between successive outputs of a request.', buckets: ITL_BUCKETS, registers });
    this.e2e = new Histogram({ name: 'mstar:e2e_request_latency_seconds', help: 'Time from request arrival to its last token.', buckets: E2E_BUCKETS, registers });
    this.promptTokens = new Counter({ name: 'mstar:prompt_tokens_total', help: 'Prompt tokens processed.', registers });
    this.generationTokens = new Counter({ name: 'mstar:generation_tokens_total', help: 'Tokens generated.', registers });
    this.success = new Counter({ name: 'mstar:request_success_total', help: 'Requests finished, by finish reason.', labelNames: ['finished_reason'], registers });
  }

  observeFirstToken(seconds: number): void {
    this.ttft.observe(seconds);
  }

  observeInterToken(seconds: number): void {
    this.itl.observe(seconds);
  }

  finished(r: FinishedRequest): void {
    this.e2e.observe(r.e2eSeconds);
    this.promptTokens.inc(r.promptTokens);
    this.generationTokens.inc(r.generationTokens);
    this.success.inc({ finished_reason: r.finishReason });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
