#!/usr/bin/env node
// The `mstar` bin. Everything testable lives in cli.ts; this file only runs it.
import { runCli } from './cli.js';

runCli(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`mstar: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  },
);
