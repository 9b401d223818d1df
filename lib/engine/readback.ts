// A step's outputs on their way to the host. On cuda they are copied into pinned buffers
// behind a fence and the host waits only when it reads them; on the cpu they are read at
// once. Two sets of pinned buffers take turns, so that step N's outputs are still there,
// unread, while step N+1's come back; a set is read (waited for) before it is reused.
import { addon, type DeviceName, type Fence, type Tensor } from '../addon/index.js';

export type HostArray = Float32Array | Int32Array | BigInt64Array;

/** The values of one send: read on the first call (waiting for the GPU if need be). */
export interface Pending {
  /** Whether read() would return without waiting for the GPU. */
  ready(): boolean;
  read(): HostArray[];
}

interface Turn {
  hosts: Tensor[];
  fence?: Fence;
  /** The send whose values are in flight to `hosts`, until it is read. */
  pending?: Pending;
}

const size = (t: Tensor) => t.shape.reduce((a, b) => a * b, 1);

export class Readback {
  private readonly turns: [Turn, Turn] = [{ hosts: [] }, { hosts: [] }];
  private next = 0;

  constructor(private readonly device: DeviceName) {}

  /** Starts copying the tensors (contiguous, on this device) to the host; returns at once on cuda. */
  send(tensors: readonly Tensor[]): Pending {
    if (this.device !== 'cuda') {
      const values = tensors.map((t) => t.toArray());
      return { ready: () => true, read: () => values };
    }
    const turn = this.turns[this.next];
    this.next ^= 1;
    turn.pending?.read();  // two sends back: read before its buffers are reused
    const counts = tensors.map(size), dtypes = tensors.map((t) => t.dtype);
    tensors.forEach((t, i) => {
      if (counts[i] === 0) return;  // (logprobs with no top entries)
      let host = turn.hosts[i];
      if (!host || host.dtype !== t.dtype || host.shape[0] < counts[i]) {
        // Grown by doubling: pinned memory is slow to get and to give back.
        const size = Math.max(counts[i], 2 * (host?.shape[0] ?? 0), 256);
        host?.dispose();
        host = turn.hosts[i] = addon.pinnedEmpty(t.dtype, [size]);
      }
      const src = t.view([counts[i]]), dst = host.narrow(0, counts[i]);
      try {
        src.copyToAsync(dst);
      } finally {
        src.dispose();
        dst.dispose();
      }
    });
    turn.fence ??= addon.fence();
    turn.fence.record();
    let values: HostArray[] | undefined;
    const pending: Pending = {
      ready: () => values !== undefined || turn.fence!.done(),
      read: () => {
        if (values) return values;
        turn.fence!.wait();
        values = counts.map((n, i) => {
          if (n === 0) return dtypes[i] === 'f32' ? new Float32Array(0) : new Int32Array(0);
          const part = turn.hosts[i].narrow(0, n);
          try {
            return part.toArray();
          } finally {
            part.dispose();
          }
        });
        if (turn.pending === pending) turn.pending = undefined;
        return values;
      },
    };
    turn.pending = pending;
    return pending;
  }

  /** Waits for copies in flight, then frees the pinned buffers. */
  dispose(): void {
    for (const turn of this.turns) {
      turn.fence?.wait();
      turn.fence?.dispose();
      turn.hosts.forEach((h) => h.dispose());
      turn.hosts = [];
      turn.fence = turn.pending = undefined;
    }
  }
}
