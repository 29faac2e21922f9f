// Herald producer with go-redis v9: one job, one fan-out job, a pipelined bulk enqueue.
//
//	go mod init producer && go get github.com/redis/go-redis/v9
//	REDIS_URL=redis://127.0.0.1:6379 QUEUE=default COUNT=1000 go run producer.go
//
// See docs/job-format.md for every field.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

// job returns the fields of one job. tokens: one or more hex tokens (more than one: fan-out,
// up to 10,000). headers: topic, push_type, priority, expiration, collapse_id, id (optional).
func job(tokens []string, payload any, headers map[string]string) (map[string]any, error) {
	body, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	limit := 4096
	if headers["push_type"] == "voip" {
		limit = 5120
	}
	if len(body) > limit {
		return nil, fmt.Errorf("payload is %d bytes; the limit is %d", len(body), limit)
	}
	fields := map[string]any{"payload": string(body)}
	if len(tokens) == 1 {
		fields["token"] = tokens[0]
	} else {
		fields["tokens"] = strings.Join(tokens, ",")
	}
	for name, value := range headers {
		fields[name] = value
	}
	return fields, nil
}

func main() {
	ctx := context.Background()
	options, err := redis.ParseURL(env("REDIS_URL", "redis://127.0.0.1:6379"))
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(options)
	defer rdb.Close()
	jobsKey := "herald:{" + env("QUEUE", "default") + "}:jobs" // braces: a Redis Cluster hash tag
	token := "7a2f5c3b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809102"
	type M = map[string]any

	// 1. One notification. XAdd returns the entry id.
	fields, err := job([]string{token}, M{"aps": M{"alert": M{"title": "Order shipped", "body": "On its way."}}},
		map[string]string{"collapse_id": "order-1234"})
	if err != nil {
		log.Fatal(err)
	}
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobsKey, Values: fields}).Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("single:", id)

	// 2. Fan-out: one payload, many tokens, one entry.
	var tokens []string
	for i := 3; i <= 5; i++ {
		tokens = append(tokens, fmt.Sprintf("%s%02x", token[:len(token)-2], i))
	}
	fields, err = job(tokens, M{"aps": M{"alert": "Flash sale: 20% off today only"}},
		map[string]string{"priority": "5", "expiration": strconv.FormatInt(time.Now().Unix()+3600, 10)})
	if err != nil {
		log.Fatal(err)
	}
	id, err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobsKey, Values: fields}).Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fan-out:", id)

	// 3. Bulk: a pipeline (no MULTI) per 1,000 jobs.
	count, _ := strconv.Atoi(env("COUNT", "1000"))
	for start := 0; start < count; start += 1000 {
		_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := start; i < count && i < start+1000; i++ {
				fields, err := job([]string{fmt.Sprintf("%s%08x", token[:len(token)-8], i)},
					M{"aps": M{"alert": fmt.Sprintf("Hello #%d", i)}, "n": i}, nil)
				if err != nil {
					return err
				}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: jobsKey, Values: fields})
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("bulk:", count, "jobs")
}
