/* Metrics core: one table (below) is the single source of every metric's name, kind and help
 * text. Counters are per thread and summed when read, so the data path pays one increment of a
 * thread-local slot and no atomic; gauges are process-wide atomics; histograms are per-thread
 * log-linear bucket arrays (value in nanoseconds for durations), summed when read.
 *
 * Exported names are exactly the table's names; the exporters (Prometheus text, .stats) add the
 * labels cache_group and role. Histograms export NAME_tp50, NAME_tp90, NAME_tp99 and NAME_max
 * over the window between two snapshots (in seconds), plus NAME_count and NAME_sum totals.
 *
 * Meanings follow the seeds: mount_iorpc_* count IORPC requests only (on TCP or RDMA), so they stay
 * 0 on a member that only the TCP pool uses; TCP-pool requests have the same stages under
 * remotecache_pool_*. The server's cap on requests in process [R4] is one for both services: the
 * sum mount_iorpc_inflight + remotecache_pool_inflight never exceeds remotecache_inflight_limit,
 * and a request of either service that finds the cap reached waits (the *_queued gauges). */
#ifndef SHOAL_METRICS_METRICS_H
#define SHOAL_METRICS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(id, kind, help). kind: COUNTER, GAUGE or HIST. Sections follow `shoal stats` letters. */
#define SHOAL_METRICS_TABLE(X)                                                                     \
        /* f: fuse */                                                                              \
        X(fuse_ops, COUNTER, "FUSE operations handled")                                            \
        X(fuse_op_dur, HIST, "FUSE operation latency")                                             \
        X(fuse_read_bytes, COUNTER, "Bytes returned to FUSE reads")                                \
        X(fuse_write_bytes, COUNTER, "Bytes accepted by FUSE writes")                              \
        X(fuse_read_size_1m, COUNTER, "FUSE read requests of at least 1 MiB")                      \
        X(fuse_reads, COUNTER, "FUSE read requests")                                               \
        X(fuse_write_requests, COUNTER, "FUSE write requests")                                     \
        X(fuse_write_files, COUNTER, "Files written through the mount and committed to the store") \
        X(fuse_write_errors, COUNTER, "Files whose upload failed (close or fsync returned EIO)")   \
        X(fuse_write_refused, COUNTER,                                                             \
          "Writes, overwrites, renames, deletes refused by the model")                             \
        X(fuse_write_aborted, COUNTER,                                                             \
          "Files abandoned before commit (writer killed, bad offset)")                             \
        X(fuse_write_commit_dur, HIST,                                                             \
          "Time close or fsync waited for the store to confirm a file")                            \
        /* m: meta (object store listing and stat on behalf of the mount) */                       \
        X(meta_ops, COUNTER, "Metadata operations (list, stat)")                                   \
        X(meta_op_dur, HIST, "Metadata operation latency")                                         \
        /* c: local block cache */                                                                 \
        X(blockcache_hits, COUNTER, "Reads served from the local disk cache")                      \
        X(blockcache_hit_bytes, COUNTER, "Bytes served from the local disk cache")                 \
        X(blockcache_miss, COUNTER, "Reads that missed the local disk cache")                      \
        X(blockcache_writes, COUNTER, "Blocks written to the local disk cache")                    \
        X(blockcache_write_bytes, COUNTER, "Bytes written to the local disk cache")                \
        X(blockcache_write_errors, COUNTER, "Failed cache inserts (full disk, I/O error)")         \
        X(blockcache_read_errors, COUNTER, "Cache reads that failed with an I/O error")            \
        X(blockcache_checksum_errors, COUNTER, "Cached blocks found corrupt and removed")          \
        X(blockcache_evictions, COUNTER, "Blocks evicted from the local disk cache")               \
        X(blockcache_evict_bytes, COUNTER, "Bytes evicted from the local disk cache")              \
        X(blockcache_blocks, GAUGE, "Blocks held in the local disk cache")                         \
        X(blockcache_bytes, GAUGE, "Bytes held in the local disk cache")                           \
        X(blockcache_read_dur, HIST, "Local disk cache read latency")                              \
        X(blockcache_dirs, GAUGE, "Cache dirs in use")                                             \
        X(blockcache_dirs_down, GAUGE, "Cache dirs taken out of use after I/O errors")             \
        X(blockcache_dir_failures, COUNTER, "Times a cache dir was taken out of use")              \
        /* buffer layer */                                                                         \
        X(buffer_hits, COUNTER, "Reads served from in-memory block buffers")                       \
        X(buffer_hit_bytes, COUNTER, "Bytes served from in-memory block buffers")                  \
        X(buffer_used_bytes, GAUGE, "Bytes of block buffers in use")                               \
        X(readahead_blocks, COUNTER, "Blocks fetched by readahead")                                \
        X(plan_hits, COUNTER, "Reads that followed a plan and found their blocks prefetched")      \
        X(plan_misses, COUNTER, "Reads that followed a plan before its prefetch landed")           \
        X(plan_offplan_reads, COUNTER, "Reads through a plan of something it did not name next")   \
        X(plan_prefetch_bytes, COUNTER, "Bytes fetched ahead in plan order")                       \
        X(plan_unused_bytes, COUNTER, "Bytes fetched ahead for plan items never read")             \
        X(plan_window_bytes, GAUGE, "Bytes of read buffers held by plan windows")                  \
        /* r: remote cache (client side: get; server side: serve) */                               \
        X(remotecache_get_requests, COUNTER, "Block reads sent to group members")                  \
        X(remotecache_get_bytes, COUNTER, "Bytes read from group members")                         \
        X(remotecache_get_errors, COUNTER, "Block reads from group members that failed")           \
        X(remotecache_get_dur, HIST, "Latency of block reads from group members")                  \
        X(remotecache_fallbacks, COUNTER,                                                          \
          "Block reads whose owner failed (then the next member in the block's order, or the "     \
          "store)")                                                                                \
        X(remotecache_auth_failures, COUNTER,                                                      \
          "Handshakes refused: a peer without the group secret (either side)")                     \
        X(remotecache_serve_requests, COUNTER, "Block reads served to group members")              \
        X(remotecache_serve_bytes, COUNTER, "Bytes served to group members")                       \
        X(remotecache_serve_errors, COUNTER, "Block reads that the server answered with an error") \
        X(remotecache_serve_dur, HIST, "Server-side latency of served block reads")                \
        X(remotecache_serve_miss, COUNTER, "Served reads that were filled from the store")         \
        X(remotecache_connections, GAUGE, "Open peer connections (client and server side)")        \
        X(remotecache_tcp_get_bytes, COUNTER, "Bytes read from members over the TCP pool")         \
        X(remotecache_iorpc_get_bytes, COUNTER, "Bytes read from members over IORPC on TCP")       \
        X(remotecache_rdma_get_bytes, COUNTER, "Bytes read from members over IORPC on RDMA")       \
        X(remotecache_tcp_serve_bytes, COUNTER, "Bytes served to members over the TCP pool")       \
        X(remotecache_iorpc_serve_bytes, COUNTER, "Bytes served to members over IORPC on TCP")     \
        X(remotecache_rdma_serve_bytes, COUNTER, "Bytes served to members over IORPC on RDMA")     \
        /* write-through [W3]: blocks of new objects pushed to their owners (PUT_BLOCK) */         \
        X(remotecache_put_requests, COUNTER, "Blocks of written objects pushed to their owners")   \
        X(remotecache_put_bytes, COUNTER, "Bytes of written objects pushed to their owners")       \
        X(remotecache_put_errors, COUNTER, "Block pushes that failed (the block stays uncached)")  \
        X(remotecache_put_dur, HIST, "Time to push the blocks of one written object")              \
        X(remotecache_put_serve_blocks, COUNTER, "Pushed blocks a member checked and cached")      \
        X(remotecache_put_serve_bytes, COUNTER, "Bytes of pushed blocks a member cached")          \
        X(remotecache_put_refused, COUNTER,                                                        \
          "Block pushes a member refused (length, checksum, version, owner, busy)")                \
        X(remotecache_put_conflicts, COUNTER,                                                      \
          "Pushed blocks whose bytes differed from the cached copy's: both dropped")               \
        /* IORPC stages (names as in the seeds): IORPC requests only, on TCP or RDMA [V2, V4] */   \
        X(mount_iorpc_processRespDur, HIST, "IORPC server: time to process a request")             \
        X(mount_iorpc_writeBodyDur, HIST, "IORPC server: time to write an answer body")            \
        X(mount_iorpc_decodeBodyDur, HIST, "IORPC: time to decode a request or answer body")       \
        X(mount_iorpc_inflight, GAUGE, "IORPC server: requests being processed")                   \
        X(mount_iorpc_queued, GAUGE, "IORPC server: requests waiting for a processing slot")       \
        X(mount_iorpc_inflight_max, GAUGE, "IORPC server: most requests processed at once")        \
        X(mount_iorpc_queued_max, GAUGE, "IORPC server: most requests waiting at once")            \
        /* The same stages for TCP-pool requests */                                                \
        X(remotecache_pool_processRespDur, HIST, "TCP pool server: time to process a request")     \
        X(remotecache_pool_writeBodyDur, HIST, "TCP pool server: time to write an answer body")    \
        X(remotecache_pool_decodeBodyDur, HIST, "TCP pool: time to decode a request or answer")    \
        X(remotecache_pool_inflight, GAUGE, "TCP pool server: requests being processed")           \
        X(remotecache_pool_queued, GAUGE, "TCP pool server: requests waiting for a slot")          \
        X(remotecache_pool_inflight_max, GAUGE,                                                    \
          "TCP pool server: most requests processed at once")                                      \
        X(remotecache_pool_queued_max, GAUGE, "TCP pool server: most requests waiting at once")    \
        /* One cap on requests in process, shared by IORPC and the TCP pool [R4] */                \
        X(remotecache_inflight_limit, GAUGE,                                                       \
          "Requests the server processes at once, IORPC and TCP pool together")                    \
        /* e: rdma */                                                                              \
        X(rdma_write_bytes, COUNTER, "Bytes written by RDMA to requesters")                        \
        X(rdma_read_bytes, COUNTER, "Request bytes received over RDMA")                            \
        X(rdma_write_ops, COUNTER, "RDMA write operations")                                        \
        X(rdma_write_dur, HIST, "RDMA write latency")                                              \
        X(rdma_recv_bytes, COUNTER, "Payload bytes received over RDMA")                            \
        X(rdma_failovers, COUNTER, "RDMA connections that failed over to TCP")                     \
        X(rdma_channels, GAUGE, "RDMA channels open to members (client)")                          \
        X(rdma_wait_spills, COUNTER,                                                               \
          "RDMA requests that waited too long for a credit: sent by TCP")                          \
        X(rdma_preauth_conns, GAUGE, "RDMA connections not yet authenticated (member)")            \
        X(rdma_registered_bytes, GAUGE, "Bytes registered for RDMA connections' own buffers")      \
        X(rdma_rejected, COUNTER, "RDMA connection requests refused by the member's limits")       \
        X(rdma_connect_retries, COUNTER,                                                           \
          "RDMA connections refused by a member and tried again (client)")                         \
        X(rdma_if0_bytes, COUNTER, "RDMA payload bytes on the 1st --rdma-network interface")       \
        X(rdma_if1_bytes, COUNTER, "RDMA payload bytes on the 2nd --rdma-network interface")       \
        X(rdma_if2_bytes, COUNTER, "RDMA payload bytes on the 3rd --rdma-network interface")       \
        X(rdma_if3_bytes, COUNTER, "RDMA payload bytes on the 4th --rdma-network interface")       \
        /* cache group */                                                                          \
        X(group_members_alive, GAUGE, "Live members in this process's view of the group")          \
        X(group_members_away, GAUGE, "Members away but keeping their place (grace period)")        \
        X(group_prev_owner_fetches, COUNTER,                                                       \
          "Blocks a new owner read from their owner in the previous view, not the store")          \
        X(group_prev_owner_misses, COUNTER,                                                        \
          "Blocks a new owner asked the previous owner for, in vain (then the store)")             \
        X(group_spread_reads, COUNTER,                                                             \
          "Reads sent to the next member in the block's order because the owner was busy")         \
        X(group_spread_copies, GAUGE,                                                              \
          "Second copies held in memory: blocks filled from their owner for spread reads")         \
        X(group_peer_fills, COUNTER,                                                               \
          "Blocks this member filled from their owner as the next member in their order")          \
        X(group_view_differs_answers, COUNTER,                                                     \
          "Reads refused as not this member's, asked under another view than this member's")       \
        X(group_view_early_refreshes, COUNTER,                                                     \
          "View refreshes made at once, not at the next heartbeat: a member saw another view")     \
        X(registry_full_reads, COUNTER,                                                            \
          "Whole-group reads from the registry by a backend that keeps a mirror (etcd)")           \
        X(registry_watch_events, COUNTER,                                                          \
          "Changes of the group received by the registry's watch (etcd)")                          \
        /* o: object store */                                                                      \
        X(object_get_requests, COUNTER, "Object store GETs (ranged reads)")                        \
        X(object_get_bytes, COUNTER, "Bytes read from the object store")                           \
        X(object_get_errors, COUNTER, "Object store GETs that failed (after retries)")             \
        X(object_get_retries, COUNTER, "Object store GETs retried")                                \
        X(object_get_dur, HIST, "Object store GET latency")                                        \
        X(object_head_requests, COUNTER, "Object store HEAD/stat requests")                        \
        X(object_list_requests, COUNTER, "Object store list requests")                             \
        X(object_put_errors, COUNTER, "Object uploads that failed (after retries)")                \
        X(object_put_retries, COUNTER, "Object store PUTs (parts included) retried")               \
        X(object_put_dur, HIST, "Object store PUT latency (one request or one part)")              \
        X(object_put_objects, COUNTER, "Objects committed to the object store")                    \
        X(object_put_commit_dur, HIST, "Time a commit waited for the store to confirm an object")  \
        X(object_put_buffer_bytes, GAUGE, "Bytes of upload part buffers held")                     \
        X(object_multipart_uploads, COUNTER, "Multipart uploads started")                          \
        X(object_multipart_aborts, COUNTER, "Multipart uploads aborted after a failure")           \
        X(object_delete_requests, COUNTER, "Object store DELETEs")                                 \
        X(object_put_requests, COUNTER, "Object store PUTs")                                       \
        X(object_put_bytes, COUNTER, "Bytes written to the object store")

enum shoal_metric_id {
#define SHOAL_METRIC_ENUM(id, kind, help) SHOAL_M_##id,
        SHOAL_METRICS_TABLE(SHOAL_METRIC_ENUM)
#undef SHOAL_METRIC_ENUM
        SHOAL_M__COUNT
};

enum shoal_metric_kind {
        SHOAL_METRIC_COUNTER,
        SHOAL_METRIC_GAUGE,
        SHOAL_METRIC_HIST,
};

struct shoal_metric_def {
        const char *name;
        enum shoal_metric_kind kind;
        const char *help;
};

/* The table as data, indexed by enum shoal_metric_id. */
extern const struct shoal_metric_def shoal_metric_defs[SHOAL_M__COUNT];

/* Data-path calls; each is a few instructions on a thread-local slot (counters, histograms) or
 * one relaxed atomic (gauges). Safe from any thread, including threads that exit later (their
 * values are kept). Calling add/observe on an id of the wrong kind is a programming error. */
void shoal_metric_add(enum shoal_metric_id id, uint64_t v);
void shoal_metric_gauge_add(enum shoal_metric_id id, int64_t delta);
void shoal_metric_gauge_set(enum shoal_metric_id id, int64_t v);
void shoal_metric_observe(enum shoal_metric_id id, uint64_t value); /* ns for durations */
#define shoal_metric_inc(id) shoal_metric_add((id), 1)

/* Histogram buckets: log-linear, 8 sub-buckets per power of two, values up to 2^63. */
#define SHOAL_HIST_SUB     8
#define SHOAL_HIST_BUCKETS (64 * SHOAL_HIST_SUB)

struct shoal_hist_snap {
        uint64_t count;
        uint64_t sum;
        uint64_t max; /* largest value seen since the process started */
        uint64_t buckets[SHOAL_HIST_BUCKETS];
};

/* A consistent-enough sum of every thread's values at one moment. */
struct shoal_metrics_snap {
        uint64_t taken_ns;                 /* monotonic */
        uint64_t counters[SHOAL_M__COUNT]; /* counters; gauges as int64 cast */
        struct shoal_hist_snap *hists;     /* SHOAL_M__COUNT entries; only HIST ids filled */
};

/* Take and release the lock of the per-thread counter registry around fork() (libshoal's
 * pthread_atfork handlers; done in both parent and child), so that a child never inherits it held
 * by a thread that does not exist there. */
void shoal_metrics_fork_prepare(void);
void shoal_metrics_fork_done(bool child);

/* Allocates and fills SNAP (free with shoal_metrics_snap_free). Returns 0 or -ENOMEM. */
int shoal_metrics_snap_take(struct shoal_metrics_snap *snap);
void shoal_metrics_snap_free(struct shoal_metrics_snap *snap);

/* Bucket index of VALUE and the upper bound of bucket B (exposed for tests). */
unsigned shoal_hist_bucket(uint64_t value);
uint64_t shoal_hist_bucket_upper(unsigned b);

/* Quantile Q (0..1) of the values observed between PREV and CUR (PREV may be NULL: since
 * start); 0 when nothing was observed. The answer is the bucket's upper bound, so within
 * 1/SHOAL_HIST_SUB of the true value. Max over the window is approximated the same way. */
uint64_t shoal_hist_quantile(const struct shoal_hist_snap *cur, const struct shoal_hist_snap *prev,
                             double q);
uint64_t shoal_hist_window_max(const struct shoal_hist_snap *cur,
                               const struct shoal_hist_snap *prev);

/* Process-wide figures for the usage section. */
struct shoal_process_stats {
        double cpu_seconds; /* user + system */
        uint64_t rss_bytes;
        unsigned threads;
        unsigned open_fds;
};
void shoal_process_stats_read(struct shoal_process_stats *ps);

/* Renders every metric as Prometheus text (version 0.0.4) with the labels cache_group and role
 * added to every sample (LABELS like `cache_group="g",role="Provider"`, may be empty), using
 * PREV..CUR as the window of the histogram quantiles. Returns a malloc'd string (caller frees) or
 * NULL. */
char *shoal_metrics_render_prometheus(const struct shoal_metrics_snap *cur,
                                      const struct shoal_metrics_snap *prev, const char *labels);
/* Renders the `.stats` text: one "name value" line per metric (histograms as NAME_count,
 * NAME_sum (seconds), NAME_tp50..NAME_max), plus process figures (cpu, rss, threads, fds). */
char *shoal_metrics_render_stats(const struct shoal_metrics_snap *cur,
                                 const struct shoal_metrics_snap *prev);

#endif
