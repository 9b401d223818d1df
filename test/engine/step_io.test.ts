// StagedUploads and Readback on the cpu (synchronous there); test/gpu/step_io.test.ts runs
// the same cases on cuda.
import { describe } from 'vitest';

import { stepIoCases } from './step_io.js';

describe('step inputs and outputs on the cpu', () => stepIoCases('cpu'));
