#!/usr/bin/env node
// The Durable Streams Node reference server (@durable-streams/server,
// DurableStreamTestServer) with its in-memory store: the baseline the
// conformance suite is compared against, and a benchmark opponent.
//
//   node reference-server.mjs [--port N] [--host H] [--long-poll-timeout MS]
//                             [--no-compression]
//
// Port 0 (the default) picks a free port. Prints `listening on http://H:P`
// on stdout once it accepts connections; stops on SIGTERM / SIGINT, and then
// prints on stderr how many streams were created and deleted, and how many
// the store still held.
import { DurableStreamTestServer } from "@durable-streams/server"

function usage(message) {
  if (message) console.error(`error: ${message}`)
  console.error(
    `usage: node reference-server.mjs [--port N] [--host H] [--long-poll-timeout MS] [--no-compression]`
  )
  process.exit(2)
}

const options = {
  port: 0,
  host: `127.0.0.1`,
  longPollTimeout: 30_000, // the server's own default
  compression: true, // the server's own default
}
const args = process.argv.slice(2)
for (let i = 0; i < args.length; i++) {
  const arg = args[i]
  const value = () => {
    if (i + 1 >= args.length) usage(`${arg} needs a value`)
    return args[++i]
  }
  const integer = (text) => {
    const n = Number(text)
    if (!Number.isInteger(n) || n < 0) usage(`${arg}: not a non-negative integer: ${text}`)
    return n
  }
  if (arg === `--port`) options.port = integer(value())
  else if (arg === `--host`) options.host = value()
  else if (arg === `--long-poll-timeout`) options.longPollTimeout = integer(value())
  else if (arg === `--no-compression`) options.compression = false
  else if (arg === `--help` || arg === `-h`) usage()
  else usage(`unknown argument: ${arg}`)
}

const counts = { created: 0, deleted: 0 }
options.onStreamCreated = () => {
  counts.created++
}
options.onStreamDeleted = () => {
  counts.deleted++
}

const server = new DurableStreamTestServer(options)
const url = await server.start()
console.log(`listening on ${url}`)

let stopping = false
async function shutdown(signal) {
  if (stopping) {
    console.error(`${signal} again: exiting now`)
    process.exit(130)
  }
  stopping = true
  const held = server.store.streams?.size ?? `?`
  console.error(
    `streams: ${counts.created} created, ${counts.deleted} deleted (DELETE), ${held} held by the store at stop`
  )
  // stop() waits for open connections; do not wait for them forever.
  const force = setTimeout(() => {
    console.error(`stop did not finish within 3 s: exiting`)
    process.exit(1)
  }, 3_000)
  force.unref()
  try {
    await server.stop()
    process.exit(0)
  } catch (error) {
    console.error(`error while stopping: ${error?.message ?? error}`)
    process.exit(1)
  }
}
process.on(`SIGTERM`, () => shutdown(`SIGTERM`))
process.on(`SIGINT`, () => shutdown(`SIGINT`))
