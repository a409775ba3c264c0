// Runs the official Durable Streams server conformance suite against the
// server at DS_BASE_URL (its root, e.g. http://127.0.0.1:7070: the suite
// itself requests /v1/stream/<name> under it).
// DS_LONG_POLL_TIMEOUT_MS (optional) is the server's long-poll timeout; the
// suite waits that long plus 1 s in its long-poll tests (default 20000).
import { describe } from "vitest"
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.DS_BASE_URL
if (!baseUrl) {
  throw new Error(
    `DS_BASE_URL is not set: give the server's root URL, e.g. ` +
      `DS_BASE_URL=http://127.0.0.1:7070 npx vitest run (or use scripts/conformance.sh)`
  )
}
const options = { baseUrl: baseUrl.replace(/\/+$/, ``) }
if (process.env.DS_LONG_POLL_TIMEOUT_MS) {
  options.longPollTimeoutMs = Number(process.env.DS_LONG_POLL_TIMEOUT_MS)
}

describe(`Durable Streams conformance (${options.baseUrl})`, () => {
  runConformanceTests(options)
})
