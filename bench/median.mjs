// The bench scripts' one summary of repeated timings: the middle value (the upper one of an
// even count), which a slow outlier or two (a clock change, another process) leaves alone.
export const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
