// The graphile-worker client of the peer benchmark (benches/peers/run.py
// drives it), with the same stdin commands as the Rust client
// (src/main.rs): `mark`, `probe <n>`, `stop`.
//
// Usage: node worker.js <url> <body µs> <backlog> [feed]
//
// Batched mode, the settings of graphile-worker's performance page
// (https://worker.graphile.org/docs/performance): concurrentJobs 24,
// maxPoolSize 25, localQueue.size 500, completeJobBatchDelay 0,
// failJobBatchDelay 0; plus useNodeTime (the job fetch compares run_at with
// the time Node.js sends instead of calling now() in PostgreSQL).
// The backlog is inserted before the worker starts with
// graphile_worker.add_jobs, 50,000 jobs a call; `feed` jobs the same way
// every 100 ms while it runs. A probe is added with WorkerUtils.addJob.
"use strict";
const readline = require("node:readline");
const { run, makeWorkerUtils, Logger } = require("graphile-worker");

const [url, bodyUs, backlogArg, feedArg] = process.argv.slice(2);
const work = Number(bodyUs) / 1000;
const backlog = Number(backlogArg);
const feed = Number(feedArg || 0);
const t0 = process.hrtime.bigint();
const secs = () => Number(process.hrtime.bigint() - t0) / 1e9;
let runs = 0;
const probeStarts = [];
const quiet = new Logger(() => (level, message) => {
  if (level === "error") process.stderr.write(`${message}\n`);
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const ADD =
  "SELECT graphile_worker.add_jobs(array(SELECT json_populate_record(null::graphile_worker.job_spec, " +
  "json_build_object('identifier', 'peers_work', 'payload', '{}'::json)) FROM generate_series(1, $1)))";

async function addJobs(utils, n) {
  while (n > 0) {
    const now = Math.min(n, 50000);
    await utils.withPgClient((c) => c.query(ADD, [now]));
    n -= now;
  }
}

async function main() {
  const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
  await utils.migrate();
  await addJobs(utils, backlog);
  await utils.withPgClient((c) => c.query("VACUUM ANALYZE graphile_worker._private_jobs"));
  const runner = await run({
    connectionString: url,
    concurrency: 24,
    maxPoolSize: 25,
    noHandleSignals: true,
    logger: quiet,
    preset: {
      worker: {
        concurrentJobs: 24,
        maxPoolSize: 25,
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
        useNodeTime: true,
      },
    },
    taskList: {
      peers_work: async () => {
        runs++;
        if (work > 0) await sleep(work);
      },
      peers_probe: async () => {
        probeStarts.push(process.hrtime.bigint());
      },
    },
  });
  let feeding = null;
  if (feed > 0) {
    let busy = false;
    feeding = setInterval(() => {
      if (busy) return;
      busy = true;
      addJobs(utils, feed).finally(() => (busy = false));
    }, 100);
  }
  console.log("ready");
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const words = line.trim().split(/\s+/);
    if (words[0] === "mark") {
      console.log(`mark ${runs} ${secs().toFixed(6)}`);
    } else if (words[0] === "probe") {
      const out = [];
      const n = Number(words[1]);
      for (let i = 0; i < n; i++) {
        const seen = probeStarts.length;
        const t = process.hrtime.bigint();
        await utils.addJob("peers_probe", {});
        let got = -1;
        while (Number(process.hrtime.bigint() - t) < 5e9) {
          if (probeStarts.length > seen) {
            got = Math.round(Number(probeStarts[seen] - t) / 1000);
            break;
          }
          await new Promise((r) => setImmediate(r));
          await sleep(0.2);
        }
        out.push(String(got));
        // Three misses in a row: past its capacity, stop probing.
        if (out.length >= 3 && out.slice(-3).every((x) => x === "-1")) break;
        await sleep(20 + ((i * 37) % 60));
      }
      console.log(`probe ${out.join(" ")}`);
    } else if (words[0] === "stop") {
      break;
    }
  }
  if (feeding) clearInterval(feeding);
  await Promise.race([runner.stop(), sleep(10000)]);
  await utils.release();
  console.log("stopped");
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
