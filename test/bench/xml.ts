// A small well-formedness check for the SVG: every tag closes in order, attributes are quoted,
// and '&' only starts an entity. Enough to catch what a hand-written SVG gets wrong.
export function checkWellFormed(xml: string): void {
  const body = xml.replace(/^<\?xml[^?]*\?>\s*/, '');
  const stack: string[] = [];
  const tag = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/g;
  let last = 0;
  let m: RegExpExecArray | null;
  while ((m = tag.exec(body)) !== null) {
    const text = body.slice(last, m.index);
    if (text.includes('<') || text.includes('>')) throw new Error(`stray markup near ${JSON.stringify(text.slice(0, 60))}`);
    if (/&(?!amp;|lt;|gt;|quot;|apos;|#\d+;)/.test(text)) throw new Error(`bare & in ${JSON.stringify(text)}`);
    last = tag.lastIndex;
    const [, closing, name, , selfClosing] = m;
    if (closing) {
      const open = stack.pop();
      if (open !== name) throw new Error(`</${name}> closes <${open}>`);
    } else if (!selfClosing) {
      stack.push(name);
    }
  }
  if (body.slice(last).trim() !== '') throw new Error(`text after the root: ${JSON.stringify(body.slice(last, last + 60))}`);
  if (stack.length > 0) throw new Error(`unclosed <${stack.join('>, <')}>`);
}
