// Runs node-redis's scanIterator (node-redis 4 or 5, installed as the npm
// aliases redis4 and redis5) to the end and prints every key it yielded, one
// per line. node-redis 4 parses cursors as JavaScript Numbers: a cursor above
// 2^53 would come back rounded. Used by tests/native_clients.rs.
//
//   node node-redis-scan.js 4|5 PORT [MATCH [COUNT]]
//
// MATCH "" and COUNT 0 mean "not given". Exits non-zero on any error, or after 60 s.
"use strict";

const [major, port, match, count] = process.argv.slice(2);
if (!["4", "5"].includes(major) || !port) {
  console.error("usage: node node-redis-scan.js 4|5 PORT [MATCH [COUNT]]");
  process.exit(2);
}
const { createClient } = require(`redis${major}`);
const opts = {};
if (match) opts.MATCH = match;
if (count && Number(count) > 0) opts.COUNT = Number(count);

const timer = setTimeout(() => {
  console.error("node-redis-scan.js: no end within 60 s");
  process.exit(3);
}, 60000);

(async () => {
  const client = createClient({ socket: { host: "127.0.0.1", port: Number(port), reconnectStrategy: false } });
  client.on("error", () => {}); // reported by the command that failed
  await client.connect();
  const out = [];
  for await (const got of client.scanIterator(opts)) {
    // node-redis 4 yields keys one by one, node-redis 5 a page at a time.
    for (const k of Array.isArray(got) ? got : [got]) out.push(k);
  }
  process.stdout.write(out.map((k) => `${k}\n`).join(""));
  clearTimeout(timer);
  await client.quit();
})().catch((e) => {
  console.error(`node-redis-scan.js: ${e.message}`);
  process.exit(1);
});
