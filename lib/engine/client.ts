// The HTTP thread's handle on the engine thread. Requests go over a message port; each
// request's outputs come back as an async iterable. Nothing here waits on the GPU or CPU work.
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { packageRoot } from '../addon/loader.js';
import type { EngineOptions } from './options.js';
import type { AdapterInfo, FromEngine, ToEngine, WorkerInit } from './protocol.js';
import { wallClock } from './trace.js';
import type { EngineStats, GenerateRequest, ModelInfo, RequestOutput } from './types.js';

export type { EngineOptions } from './options.js';

/** How long close() waits for the engine thread to finish its step and exit. */
const CLOSE_TIMEOUT_MS = 10_000;
export type { AdapterInfo } from './protocol.js';

/** A request's pending outputs and its waiting consumer. */
class OutputQueue {
  private readonly items: RequestOutput[] = [];
  private wake?: () => void;
  error?: Error;
  done = false;

  push(o: RequestOutput): void {
    this.items.push(o);
    if (o.finishReason) this.done = true;
    this.wake?.();
  }

  fail(e: Error): void {
    this.error = e;
    this.done = true;
    this.wake?.();
  }

  async *drain(): AsyncGenerator<RequestOutput> {
    for (;;) {
      while (this.items.length > 0) yield this.items.shift()!;
      if (this.error) throw this.error;
      if (this.done) return;
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }
}

/** The engine could not start; `config`: because of what its options ask for (the KV cache's size, max_seq_len). */
export class EngineStartError extends Error {
  override name = 'EngineStartError';

  constructor(message: string, readonly config: boolean) {
    super(message);
  }
}

export class EngineClient {
  private readonly queues = new Map<string, OutputQueue>();
  private latest: EngineStats;
  private fatal?: Error;
  private loaded: AdapterInfo[];
  private calls = 0;
  private readonly pending = new Map<number, (m: Extract<FromEngine, { type: 'adapterResult' }>) => void>();

  private constructor(
    private readonly worker: Worker, readonly info: ModelInfo, stats: EngineStats, adapters: AdapterInfo[],
    /** Progress lines may come after the start too. */
    private readonly onProgress?: (message: string) => void,
  ) {
    this.latest = stats;
    this.loaded = adapters;
    worker.on('message', (m: FromEngine) => this.receive(m));
    worker.on('error', (e) => this.die(e));
    worker.on('exit', (code) => this.die(new Error(`the engine thread exited (code ${code})`)));
  }

  /** Starts the engine thread and resolves once the model is loaded; rejects with EngineStartError. */
  static start(options: EngineOptions): Promise<EngineClient> {
    const { onProgress, ...init } = options;
    const worker = new Worker(join(packageRoot(), 'dist', 'lib', 'engine', 'worker.js'), { workerData: init satisfies WorkerInit });
    return new Promise((resolve, reject) => {
      const onMessage = (m: FromEngine): void => {
        if (m.type === 'progress') onProgress?.(m.message);
        else if (m.type === 'fatal') reject(new EngineStartError(m.message, m.config === true));
        else if (m.type === 'ready') {
          worker.off('message', onMessage);
          worker.off('error', reject);
          resolve(new EngineClient(worker, m.info, m.stats, m.adapters, onProgress));
        }
      };
      worker.on('message', onMessage);
      worker.on('error', reject);
    });
  }

  generate(request: GenerateRequest): AsyncIterable<RequestOutput> {
    const q = new OutputQueue();
    if (this.fatal) q.fail(this.fatal);
    else if (this.queues.has(request.id)) q.fail(new Error(`request id ${request.id} is already in use`));
    else {
      this.queues.set(request.id, q);
      this.send({ type: 'add', request });
    }
    return q.drain();
  }

  abort(id: string): void {
    if (this.queues.has(id)) this.send({ type: 'abort', id });
  }

  stats(): EngineStats {
    return this.latest;
  }

  /** Adapters requests may name now. */
  adapters(): AdapterInfo[] {
    return this.loaded;
  }

  /** Registers a PEFT adapter; rejects with the reason (nothing changes) if it is refused. */
  async loadAdapter(name: string, path: string): Promise<void> {
    const r = await this.call((call) => ({ type: 'loadAdapter', call, name, path }));
    if (r.error) throw new Error(r.error);
  }

  /** Resolves false if no adapter had that name. Running requests on it finish first. */
  async unloadAdapter(name: string): Promise<boolean> {
    const r = await this.call((call) => ({ type: 'unloadAdapter', call, name }));
    if (r.error) throw new Error(r.error);  // the engine died meanwhile: not "no such adapter"
    return r.found === true;
  }

  private call(make: (call: number) => ToEngine): Promise<Extract<FromEngine, { type: 'adapterResult' }>> {
    if (this.fatal) return Promise.reject(this.fatal);
    const call = ++this.calls;
    return new Promise((resolve) => {
      this.pending.set(call, resolve);
      this.send(make(call));
    });
  }

  /**
   * Stops the engine thread between two steps (terminating it inside a native call could
   * abort the process); requests still open fail with "the engine was closed". A second
   * call waits for the first.
   */
  close(): Promise<void> {
    return (this.closing ??= this.stop());
  }

  private closing?: Promise<void>;

  private async stop(): Promise<void> {
    this.die(new Error('the engine was closed'));
    this.worker.removeAllListeners('exit');
    const exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
    this.send({ type: 'close' });
    const timeout = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), CLOSE_TIMEOUT_MS).unref());
    if ((await Promise.race([exited, timeout])) === 'late') await this.worker.terminate();
  }

  /** False once the engine thread has died or was closed. */
  healthy(): boolean {
    return this.fatal === undefined;
  }

  private send(m: ToEngine): void {
    this.worker.postMessage(m);
  }

  private receive(m: FromEngine): void {
    if (m.type === 'outputs') {
      this.latest = m.stats;
      for (const o of m.outputs) {
        if (o.trace) o.trace.delivered = wallClock();
        const q = this.queues.get(o.id);
        if (!q) continue;
        if (o.error !== undefined) {
          q.fail(Object.assign(new Error(o.error), { statusCode: 500 }));
          this.queues.delete(o.id);
          continue;
        }
        q.push(o);
        if (o.finishReason) this.queues.delete(o.id);
      }
    } else if (m.type === 'adapterResult') {
      this.loaded = m.adapters;
      if (m.stats) this.latest = m.stats;
      this.pending.get(m.call)?.(m);
      this.pending.delete(m.call);
    } else if (m.type === 'rejected') {
      // The engine refused the request itself (too long, unknown adapter): a client error.
      this.queues.get(m.id)?.fail(Object.assign(new Error(m.message), { statusCode: 400 }));
      this.queues.delete(m.id);
    } else if (m.type === 'fatal') {
      this.die(new Error(m.message));
    } else if (m.type === 'progress') {
      this.onProgress?.(m.message);
    }
  }

  private die(e: Error): void {
    this.fatal ??= e;
    for (const q of this.queues.values()) q.fail(this.fatal);
    this.queues.clear();
    for (const [call, done] of this.pending) done({ type: 'adapterResult', call, error: this.fatal.message, adapters: this.loaded });
    this.pending.clear();
  }
}
