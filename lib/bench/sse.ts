// Server-sent events from a fetch body: yields each event's data (multi-line data joined with
// "\n"), per the HTML spec's parsing rules; stops at OpenAI's "[DONE]" sentinel.

export async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  let data: string[] = [];
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let newline: number;
      // A lone "\r" at the end of the buffer may be half of a "\r\n" split across reads: wait for more.
      while ((newline = buffer.search(done ? /\r\n|\r|\n/ : /\r\n|\n|\r(?=[^\n])/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
        if (line === '') {
          if (data.length > 0) {
            const event = data.join('\n');
            data = [];
            if (event === '[DONE]') {
              // Nothing follows the sentinel; cancelling frees the connection without waiting for EOF.
              await reader.cancel().catch(() => {});
              return;
            }
            yield event;
          }
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
        }
        // Comments (":") and other fields (event, id, retry) carry nothing a benchmark needs.
      }
      if (done) {
        // The spec drops an event the stream cut short; a benchmark would rather count its token.
        if (buffer.startsWith('data:')) data.push(buffer.slice(buffer.startsWith('data: ') ? 6 : 5));
        if (data.length > 0 && data.join('\n') !== '[DONE]') yield data.join('\n');
        return;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
