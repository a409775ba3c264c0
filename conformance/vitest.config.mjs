// Vitest configuration for the Durable Streams server conformance suite
// (@durable-streams/server-conformance-tests). scripts/conformance.sh runs
// it; by hand: DS_BASE_URL=http://127.0.0.1:PORT npx vitest run
import { defineConfig } from "vitest/config"

// DS_JSON_REPORT=path also writes vitest's JSON report there (counts and
// per-test status for scripts).
const reporters = [`verbose`]
if (process.env.DS_JSON_REPORT) {
  reporters.push([`json`, { outputFile: process.env.DS_JSON_REPORT }])
}

export default defineConfig({
  test: {
    include: [`conformance.test.mjs`],
    // The suite's own long-poll tests set their timeout to
    // longPollTimeoutMs + 1 s (21 s by default); everything else gets this.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // One file, one server: the tests inside run in order, except the ones
    // the suite marks test.concurrent (TTL expiry), at most maxConcurrency
    // (vitest's default, 5) at once.
    fileParallelism: false,
    maxConcurrency: 5,
    // No retries: a flaky conformance test is a finding.
    retry: 0,
    reporters,
  },
})
