// The addon as the rest of lib/ sees it.
import { loadBinding } from './loader.js';

export type { Binding, BuildInfo, DType, DeviceName, Fence, FloatDType, Graph, LoraDelta, ScatterPlan, ScatterRegion, Tensor, UploadRegion } from './types.js';

export const addon = loadBinding();
