// Runs one of ioredis's scan streams to the end and prints every element it
// yielded, one per line (keys; field/value or member/score pairs flattened),
// then "calls <n>": how many pages the stream read. Used by tests/native_clients.rs.
//
//   node scan-stream.js PORT scan [MATCH [COUNT]]
//   node scan-stream.js PORT hscan|sscan|zscan KEY [MATCH [COUNT]]
//
// MATCH "" and COUNT 0 mean "not given" (ioredis then sends neither).
// Exits non-zero on any error, or after 60 s.
"use strict";
const Redis = require("ioredis");

const [port, kind, ...rest] = process.argv.slice(2);
const streams = { scan: "scanStream", hscan: "hscanStream", sscan: "sscanStream", zscan: "zscanStream" };
if (!port || !streams[kind]) {
  console.error("usage: node scan-stream.js PORT scan|hscan|sscan|zscan [KEY] [MATCH [COUNT]]");
  process.exit(2);
}
const key = kind === "scan" ? null : rest.shift();
const [match, count] = rest;
const opts = {};
if (match) opts.match = match;
if (count && Number(count) > 0) opts.count = Number(count);

const timer = setTimeout(() => {
  console.error("scan-stream.js: no end within 60 s");
  process.exit(3);
}, 60000);

const redis = new Redis({ host: "127.0.0.1", port: Number(port), lazyConnect: true, maxRetriesPerRequest: 0 });
redis.on("error", () => {}); // reported by the command that failed
redis
  .connect()
  .then(() => {
    const stream = key === null ? redis[streams[kind]](opts) : redis[streams[kind]](key, opts);
    const out = [];
    let calls = 0;
    stream.on("data", (page) => {
      calls += 1;
      for (const e of page) out.push(e);
    });
    stream.on("error", (e) => {
      console.error(`scan-stream.js: ${e.message}`);
      process.exit(1);
    });
    stream.on("end", () => {
      process.stdout.write(out.map((e) => `${e}\n`).join("") + `calls ${calls}\n`);
      clearTimeout(timer);
      redis.disconnect();
    });
  })
  .catch((e) => {
    console.error(`scan-stream.js: ${e.message}`);
    process.exit(1);
  });
