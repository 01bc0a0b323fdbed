/* What an S3 server sends back, parsed (internal to src/store): response headers and bodies as
 * libcurl hands them over, ListObjectsV2 pages, error bodies, ETags and Content-Range. Pure
 * functions on untrusted bytes (no I/O, no libcurl state), so that they can be fuzzed on their
 * own (tests/fuzz/fuzz_s3.c); store_s3.c does the requests. */
#ifndef SHOAL_STORE_S3_PARSE_H
#define SHOAL_STORE_S3_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "store/store.h"

#define SHOAL_S3_ERRBODY_MAX   4096
#define SHOAL_S3_LIST_BODY_MAX (16u * 1024u * 1024u)

/* What one request brought back. */
struct shoal_s3_resp {
        long status;
        /* 2xx body sink: a fixed buffer (GET of a range) or a growing one (listing). */
        char *buf;
        size_t cap;
        size_t got;
        bool grow;
        bool overflow;
        /* error body, kept apart so that it can never land in the caller's buffer */
        char err[SHOAL_S3_ERRBODY_MAX + 1];
        size_t err_len;
        /* headers */
        int64_t content_length; /* -1 when absent */
        char etag[SHOAL_VERSION_MAX + 3];
        char last_modified[64];
        char content_range[128];
        char request_id[64];
};

/* libcurl's CURLOPT_HEADERFUNCTION for a struct shoal_s3_resp ARG: takes one header line of
 * SIZE * N bytes (a status line starts the fields afresh) into the fields above, each cut to its
 * size and NUL-terminated. Returns the bytes taken (all of them). */
size_t shoal_s3_on_header(char *data, size_t size, size_t n, void *arg);
/* libcurl's CURLOPT_WRITEFUNCTION for a struct shoal_s3_resp ARG: a 2xx body goes into BUF (up
 * to CAP, or grown up to SHOAL_S3_LIST_BODY_MAX when GROW; more sets OVERFLOW and returns 0 to
 * abort the transfer), any other body into ERR (cut at SHOAL_S3_ERRBODY_MAX). */
size_t shoal_s3_on_body(char *data, size_t size, size_t n, void *arg);

/* Decodes the XML text [S, S+LEN) (the five named entities and numeric references) into a new
 * NUL-terminated string, never longer than the source. NULL on a malformed reference or out of
 * memory. */
char *shoal_s3_xml_text(const char *s, size_t len);
/* The decoded text of <TAG> in [P, END) (malloc'd), or NULL (absent or malformed). */
char *shoal_s3_xml_get(const char *p, const char *end, const char *tag);
/* Decodes an encoding-type=url value in place ('+' is a space). Returns 0 or -EPROTO. */
int shoal_s3_url_decode(char *s);

/* ETAG without its quotes (and without a weak "W/" mark) into OUT (OUTLEN bytes), checked with
 * shoal_version_valid. Returns 0 or -EPROTO. */
int shoal_s3_etag_version(const char *etag, char *out, size_t outlen);
/* True when the Content-Range value CR ("bytes FIRST-LAST/TOTAL") names exactly [OFF, OFF+LEN);
 * LEN > 0. */
bool shoal_s3_content_range_ok(const char *cr, uint64_t off, size_t len);

/* Parses one ListObjectsV2 page [BODY, BODY+BLEN) of a bucket whose keys are read under PREFIX
 * (PREFIX_LEN bytes, "" or ending in '/'): calls CB with its entries in key order, the prefix cut
 * off (keys outside it, or that shoal_key_valid refuses, are skipped), and returns the next
 * continuation token in *NEXT (malloc'd; NULL when the listing is complete). Returns 0, CB's
 * nonzero return, -EPROTO for a malformed page (also: truncated without a token) or -ENOMEM. */
int shoal_s3_list_page(const char *prefix, size_t prefix_len, const char *body, size_t blen,
                       shoal_list_cb cb, void *arg, char **next);

#endif
