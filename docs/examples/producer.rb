# Herald producer with redis-rb (4.6 or later): one job, one fan-out job, a pipelined bulk enqueue.
#
#   gem install redis
#   REDIS_URL=redis://127.0.0.1:6379 QUEUE=default COUNT=1000 ruby producer.rb
#
# See docs/job-format.md for every field.
require "json"
require "redis"

QUEUE = ENV.fetch("QUEUE", "default")
JOBS_KEY = "herald:{#{QUEUE}}:jobs" # braces: a Redis Cluster hash tag

# tokens: one hex token or an array (fan-out, up to 10,000). headers: topic, push_type,
# priority, expiration, collapse_id, id (all optional).
def job(tokens, payload, **headers)
  body = JSON.generate(payload)
  limit = headers[:push_type].to_s == "voip" ? 5120 : 4096
  raise ArgumentError, "payload is #{body.bytesize} bytes; the limit is #{limit}" if body.bytesize > limit
  fields = { "payload" => body }
  if tokens.is_a?(Array)
    fields["tokens"] = tokens.join(",")
  else
    fields["token"] = tokens
  end
  headers.each { |name, value| fields[name.to_s] = value.to_s unless value.nil? }
  fields
end

redis = Redis.new(url: ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379"))
token = "7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809102"

# 1. One notification. xadd returns the entry id.
puts "single: " + redis.xadd(JOBS_KEY, job(token, { aps: { alert: { title: "Order shipped", body: "On its way." } } },
                                           collapse_id: "order-1234"))

# 2. Fan-out: one payload, many tokens, one entry.
tokens = (3..5).map { |i| token[0...-2] + format("%02x", i) }
puts "fan-out: " + redis.xadd(JOBS_KEY, job(tokens, { aps: { alert: "Flash sale: 20% off today only" } },
                                            priority: 5, expiration: Time.now.to_i + 3600))

# 3. Bulk: a pipeline (no MULTI) per 1,000 jobs.
count = Integer(ENV.fetch("COUNT", "1000"))
(0...count).each_slice(1000) do |slice|
  redis.pipelined do |pipeline|
    slice.each do |i|
      pipeline.xadd(JOBS_KEY, job(token[0...-8] + format("%08x", i), { aps: { alert: "Hello ##{i}" }, n: i }))
    end
  end
end
puts "bulk: #{count} jobs"
