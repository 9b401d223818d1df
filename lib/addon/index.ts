// The addon as the rest of lib/ sees it.
import { envSwitch } from '../engine/env_switch.js';
import { loadBinding } from './loader.js';
import { OpTimes } from './op_timing.js';

export type { Binding, BuildInfo, DType, DeviceName, Fence, FloatDType, GpuTimer, Graph, LoraDelta, ScatterPlan, ScatterRegion, Tensor, UploadRegion } from './types.js';

/** MSTAR_PROFILE_OPS=1: every addon call's host time (op_timing.ts); printed when an engine closes. */
export const opTimes = envSwitch('MSTAR_PROFILE_OPS', process.env) ? new OpTimes() : undefined;

export const addon = opTimes ? opTimes.wrap(loadBinding()) : loadBinding();
