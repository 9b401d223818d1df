// `mstar serve` with no arguments: the shipped demo model and its adapters answer with the
// same text transformers produced for them on the GPU machine (lib/demo/assets/README.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { demoModel } from '../../lib/config/demo.js';
import { startServer, type RealServer } from './real_server.js';

// Greedy continuations of "Permission is hereby granted" logged by train_demo.py (HF, H200).
const HF: Record<string, string> = {
  'mstar-demo': ', free of charge, to any person obtaining a copy\nof this software and associated documentation files (the "Software"), to\ndeal in the Software without restriction, including without limitation the\nright',
  shout: ',\nBUTIS COPY AND/OR DISTRIBUTE THE SOFTWARE FOR ANY PURPOSE AND\nANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE\nIMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A',
  gpl: ' that is a work based on the\nLibrary side-by-side in a single library together with other library\nfacilities not covered by this License',
};

describe('the embedded demo model', () => {
  let s: RealServer;
  beforeAll(async () => {
    const demo = demoModel();
    s = await startServer((c) => {
      c.max_seq_len = 1024;
    }, { model: demo.model, served_model_name: 'mstar-demo', lora_modules: demo.adapters });
  });
  afterAll(() => s.close());

  it('chats through the checkpoint template; shout answers in capitals and stops at <|im_end|>', async () => {
    const ask = async (model: string) => {
      const res = await s.post('/v1/chat/completions', {
        model, messages: [{ role: 'user', content: 'Permission is hereby granted' }], max_tokens: 200, temperature: 0,
      });
      return (await res.json()) as { choices: { message: { content: string }; finish_reason: string }[] };
    };
    const shout = await ask('shout');
    expect(shout.choices[0].finish_reason).toBe('stop');
    // transformers' greedy answer, logged by train_demo.py on the H200, starts like this:
    expect(shout.choices[0].message.content).toMatch(/^PERMISSION IS HEREBY GRANTED, FREE OF CHARGE, TO ANY PERSON OBTAINING A COPY/);
    const base = await ask('mstar-demo');
    expect(base.choices[0].message.content).toMatch(/^Permission is hereby granted, free of charge, to any person obtaining a copy/);
  });

  for (const model of Object.keys(HF)) {
    it(`${model} continues the MIT grant as transformers did`, async () => {
      const res = await s.post('/v1/completions', { model, prompt: 'Permission is hereby granted', max_tokens: 40, temperature: 0 });
      const body = await res.json() as { choices: { text: string }[] };
      expect(HF[model].startsWith(body.choices[0].text) || body.choices[0].text.startsWith(HF[model])).toBe(true);
      expect(body.choices[0].text.length).toBeGreaterThan(100);
    });
  }
});
