// Scatter plans from JS: scatterPlan(regions) returns an object with run(zero?) and dispose().
#pragma once
#include <napi.h>

namespace mstar {
void RegisterScatter(Napi::Env env, Napi::Object exports);
}
