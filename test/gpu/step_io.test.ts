// StagedUploads and Readback on cuda, where uploads and readbacks return before the copies
// run: the cases of test/engine/step_io.ts.
import { stepIoCases } from '../engine/step_io.js';
import { describeGpu } from './helpers.js';

describeGpu('step inputs and outputs on cuda', () => stepIoCases('cuda'));
