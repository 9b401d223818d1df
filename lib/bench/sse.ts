// Server-sent events from a response body (a node:http response, or any stream of bytes):
// yields each event's data (multi-line data joined with "\n"), per the HTML spec's parsing
// rules; stops at OpenAI's "[DONE]" sentinel.

export async function* sseData(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const it = body[Symbol.asyncIterator]();
  let buffer = '';
  let data: string[] = [];
  let finished = false;  // the sentinel came: the rest of the body is read, not parsed
  let exhausted = false;  // the body's end was read
  try {
    for (;;) {
      const { value, done } = await it.next();
      exhausted = done === true;
      if (finished) {
        if (done) return;
        continue;
      }
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
              // Servers end the body with the sentinel. Reading it to its end (rather than
              // closing the stream) gives the connection back to the agent for the next request.
              finished = true;
              break;
            }
            yield event;
          }
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
        }
        // Comments (":") and other fields (event, id, retry) carry nothing a benchmark needs.
      }
      if (finished) {
        if (done) return;
        continue;
      }
      if (done) {
        // The spec drops an event the stream cut short; a benchmark would rather count its token.
        if (buffer.startsWith('data:')) data.push(buffer.slice(buffer.startsWith('data: ') ? 6 : 5));
        if (data.length > 0 && data.join('\n') !== '[DONE]') yield data.join('\n');
        return;
      }
    }
  } finally {
    // The consumer stopped early (an error event, an abort): the body is closed, not left open.
    if (!exhausted) await it.return?.();
  }
}
