// Herald producer with ioredis: one job, one fan-out job, a pipelined bulk enqueue.
//
//   npm install ioredis
//   REDIS_URL=redis://127.0.0.1:6379 QUEUE=default COUNT=1000 node producer-ioredis.js
//
// See docs/job-format.md for every field.
const Redis = require('ioredis');

const queue = process.env.QUEUE || 'default';
const jobsKey = `herald:{${queue}}:jobs`; // braces: a Redis Cluster hash tag

// XADD arguments after the key and id: ['token', t, 'payload', json, ...].
function job(tokens, payload, headers = {}) {
  const body = JSON.stringify(payload);
  const limit = headers.push_type === 'voip' ? 5120 : 4096;
  if (Buffer.byteLength(body) > limit) throw new Error(`payload over ${limit} bytes`);
  const fields = Array.isArray(tokens) ? ['tokens', tokens.join(',')] : ['token', tokens];
  fields.push('payload', body);
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && value !== null) fields.push(name, String(value));
  }
  return fields;
}

async function main() {
  const redis = new Redis(process.env.REDIS_URL || 'redis://127.0.0.1:6379');
  const token = '7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809102';

  // 1. One notification. xadd resolves to the entry id.
  const single = await redis.xadd(jobsKey, '*',
    ...job(token, { aps: { alert: { title: 'Order shipped', body: 'On its way.' } } }, { collapse_id: 'order-1234' }));
  console.log('single:', single);

  // 2. Fan-out: one payload, many tokens, one entry.
  const tokens = [3, 4, 5].map((i) => token.slice(0, -2) + i.toString(16).padStart(2, '0'));
  const fanOut = await redis.xadd(jobsKey, '*',
    ...job(tokens, { aps: { alert: 'Flash sale: 20% off today only' } },
      { priority: 5, expiration: Math.floor(Date.now() / 1000) + 3600 }));
  console.log('fan-out:', fanOut);

  // 3. Bulk: a pipeline per 1,000 jobs; exec() resolves to [[error, id], ...].
  const count = Number(process.env.COUNT || 1000);
  for (let start = 0; start < count; start += 1000) {
    const pipeline = redis.pipeline();
    for (let i = start; i < Math.min(count, start + 1000); i++) {
      const t = token.slice(0, -8) + i.toString(16).padStart(8, '0');
      pipeline.xadd(jobsKey, '*', ...job(t, { aps: { alert: `Hello #${i}` }, n: i }));
    }
    for (const [error] of await pipeline.exec()) if (error) throw error;
  }
  console.log('bulk:', count, 'jobs');
  await redis.quit();
}

main().catch((error) => { console.error(error); process.exit(1); });
