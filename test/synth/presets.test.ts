// The presets parse as the server parses config.json, and their tensors add up to the
// parameter counts the model cards state.
import { describe, expect, it } from 'vitest';

import { parseModelConfig } from '../../lib/checkpoint/config.js';
import { checkpointTensors } from '../../lib/synth/checkpoint_tensors.js';
import { PRESET_NAMES, presetConfig } from '../../lib/synth/presets.js';
import { planShards } from '../../lib/synth/shards.js';
import { withLayers } from '../../lib/synth/synthesize.js';

const PARAMS: Record<string, number> = {
  'qwen3-0.6b': 596_049_920,
  'qwen3-4b': 4_022_468_096,
  'qwen3-8b': 8_190_735_360,
  'llama-3.2-1b': 1_235_814_400,
  'llama-3.2-3b': 3_212_749_824,
};

describe('presets', () => {
  it.each(PRESET_NAMES)('%s has the parameter count of the real checkpoint', (name) => {
    const config = parseModelConfig(presetConfig(name));
    const params = checkpointTensors(config).reduce((a, t) => a + t.shape.reduce((p, d) => p * d, 1), 0);
    expect(params).toBe(PARAMS[name]);
  });

  it('reads Llama 3.2 RoPE scaling and ties', () => {
    const c = parseModelConfig(presetConfig('llama-3.2-1b'));
    expect(c.rope).toMatchObject({ type: 'llama3', theta: 500000, factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 });
    expect(c).toMatchObject({ headDim: 64, tieWordEmbeddings: true, rmsNormEps: 1e-5 });
    expect(parseModelConfig(presetConfig('qwen3-8b')).tieWordEmbeddings).toBe(false);
  });

  it('shards qwen3-8b into files of at most 2 GiB', () => {
    const shards = planShards(checkpointTensors(parseModelConfig(presetConfig('qwen3-8b'))));
    expect(shards).toHaveLength(8);
    expect(shards.every((s) => s.bytes <= 2 * 2 ** 30)).toBe(true);
  });

  it('--layers cuts the layer count', () => {
    const c = parseModelConfig(withLayers(presetConfig('qwen3-4b')!, 2));
    expect(c.numLayers).toBe(2);
    expect(checkpointTensors(c).filter((t) => t.name.startsWith('model.layers.')).every((t) => /^model\.layers\.[01]\./.test(t.name))).toBe(true);
  });

  it('returns copies', () => {
    presetConfig('qwen3-0.6b')!['hidden_size'] = 1;
    expect(presetConfig('qwen3-0.6b')!['hidden_size']).toBe(1024);
    expect(presetConfig('gpt-5')).toBeUndefined();
  });
});
