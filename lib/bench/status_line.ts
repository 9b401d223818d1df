// One live status line on a terminal (rewritten in place, at most every 100 ms), and ordinary
// lines that scroll above it. Off a terminal (CI logs, pipes) only the ordinary lines are written.

export interface Output {
  write(text: string): unknown;
  isTTY?: boolean;
}

const MIN_INTERVAL_MS = 100;

export class StatusLine {
  private shown = '';
  private lastDraw = 0;

  constructor(private readonly out: Output) {}

  get live(): boolean {
    return this.out.isTTY === true;
  }

  /** Replaces the status line (terminals only); `force` skips the rate limit. */
  update(text: string, force = false): void {
    if (!this.live) return;
    const now = Date.now();
    if (!force && now - this.lastDraw < MIN_INTERVAL_MS) return;
    this.lastDraw = now;
    this.shown = text;
    this.out.write(`\r\x1b[2K${text}`);
  }

  /** A permanent line. It replaces the status line, which usually reports what the line concludes; the next update draws a new one. */
  log(line: string): void {
    this.clear();
    this.out.write(`${line}\n`);
    this.lastDraw = 0;
  }

  clear(): void {
    if (this.live && this.shown !== '') this.out.write('\r\x1b[2K');
    this.shown = '';
  }
}

export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(n >= 100 ? 0 : n >= 10 ? 1 : 2)} ${units[i]}`;
}
