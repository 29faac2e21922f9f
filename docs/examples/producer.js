// Herald producer with node-redis v4: one job, one fan-out job, a pipelined bulk enqueue.
//
//   npm install redis@4
//   REDIS_URL=redis://127.0.0.1:6379 QUEUE=default COUNT=1000 node producer.js
//
// See docs/job-format.md for every field.
const { createClient } = require('redis');

const queue = process.env.QUEUE || 'default';
const jobsKey = `herald:{${queue}}:jobs`; // braces: a Redis Cluster hash tag

// tokens: one hex token or an array (fan-out, up to 10,000). headers: topic, push_type,
// priority, expiration, collapse_id, id (all optional). Every value is sent as a string.
function job(tokens, payload, headers = {}) {
  const body = JSON.stringify(payload);
  const limit = headers.push_type === 'voip' ? 5120 : 4096;
  if (Buffer.byteLength(body) > limit) throw new Error(`payload over ${limit} bytes`);
  const fields = { payload: body };
  if (Array.isArray(tokens)) fields.tokens = tokens.join(',');
  else fields.token = tokens;
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && value !== null) fields[name] = String(value);
  }
  return fields;
}

async function main() {
  const client = createClient({ url: process.env.REDIS_URL || 'redis://127.0.0.1:6379' });
  client.on('error', (error) => console.error('redis:', error.message));
  await client.connect();
  const token = '7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809102';

  // 1. One notification. xAdd resolves to the entry id.
  const single = await client.xAdd(jobsKey, '*',
    job(token, { aps: { alert: { title: 'Order shipped', body: 'On its way.' } } }, { collapse_id: 'order-1234' }));
  console.log('single:', single);

  // 2. Fan-out: one payload, many tokens, one entry.
  const tokens = [3, 4, 5].map((i) => token.slice(0, -2) + i.toString(16).padStart(2, '0'));
  const fanOut = await client.xAdd(jobsKey, '*',
    job(tokens, { aps: { alert: 'Flash sale: 20% off today only' } },
      { priority: 5, expiration: Math.floor(Date.now() / 1000) + 3600 }));
  console.log('fan-out:', fanOut);

  // 3. Bulk: a pipeline (no MULTI) per 1,000 jobs.
  const count = Number(process.env.COUNT || 1000);
  for (let start = 0; start < count; start += 1000) {
    const pipeline = client.multi();
    for (let i = start; i < Math.min(count, start + 1000); i++) {
      const t = token.slice(0, -8) + i.toString(16).padStart(8, '0');
      pipeline.xAdd(jobsKey, '*', job(t, { aps: { alert: `Hello #${i}` }, n: i }));
    }
    await pipeline.execAsPipeline();
  }
  console.log('bulk:', count, 'jobs');
  await client.quit();
}

main().catch((error) => { console.error(error); process.exit(1); });
