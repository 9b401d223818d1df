// Reads tensor bytes straight from a checkpoint file into a tensor (never via the JS heap).
#pragma once
#include <napi.h>

namespace mstar {

// readInto(dst, dstElementOffset, path, fileOffset, srcDtype, count, scale?): reads `count`
// elements of `srcDtype` at `fileOffset` of `path` and stores them (times scale, if given),
// converted to dst's dtype, from element `dstElementOffset` of `dst` on.
Napi::Value ReadInto(const Napi::CallbackInfo& info);
// readIntoAsync: the same read into a cpu tensor on a libuv thread; returns a Promise.
Napi::Value ReadIntoAsync(const Napi::CallbackInfo& info);

}  // namespace mstar
