/* server/admission.h: who gives way to a newcomer [S2] — a source at its own limit cycles its
 * own oldest silent connection, loopback counts as one source, at the overall limit only a
 * heavier source gives way, and the limits derived from the open-file limit stay in bounds. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/admission.h"

struct fake {
        struct shoal_adm_ent ent;
        struct shoal_adm *a;
        bool silent, evicted;
        char name[32];
};

static struct fake *fake_of(struct shoal_adm_ent *e)
{
        return (struct fake *)((char *)e - offsetof(struct fake, ent));
}

static bool f_silent(struct shoal_adm_ent *e)
{
        return fake_of(e)->silent;
}

static void f_evict(struct shoal_adm_ent *e)
{
        struct fake *f = fake_of(e);
        f->evicted = true;
        shoal_adm_leave(f->a, e);
}

static const char *f_name(struct shoal_adm_ent *e)
{
        return fake_of(e)->name;
}

static const struct shoal_adm_ops ops = {.silent = f_silent, .evict = f_evict, .name = f_name};

struct world {
        struct shoal_adm a;
        struct shoal_server_limits lim;
        unsigned nconns;
        struct fake f[16];
        unsigned n;
};

static void world_init(struct world *w, unsigned cap, unsigned per_src)
{
        memset(w, 0, sizeof(*w));
        w->lim = (struct shoal_server_limits){
                .conn_cap = 1000, .loop_preauth_cap = cap, .loop_preauth_per_src = per_src};
        shoal_adm_init(&w->a, &ops, &w->lim, &w->nconns);
}

static uint32_t ip(const char *s)
{
        struct in_addr a;
        assert_int_equal(inet_pton(AF_INET, s, &a), 1);
        return a.s_addr;
}

/* Admits a connection from S; returns it (NULL when refused), *EVICTED as admit said. */
static struct fake *connect_from(struct world *w, const char *s, bool silent, bool *evicted)
{
        struct shoal_adm_src *src;
        bool ev;
        if (!shoal_adm_admit(&w->a, ip(s), s, &src, &ev))
                return NULL;
        struct fake *f = &w->f[w->n++];
        f->a = &w->a;
        f->silent = silent;
        snprintf(f->name, sizeof(f->name), "%s#%u", s, w->n);
        shoal_list_init(&f->ent.link);
        shoal_adm_enter(&w->a, &f->ent, src);
        w->nconns++;
        if (evicted)
                *evicted = ev;
        return f;
}

static void world_clear(struct world *w)
{
        for (unsigned i = 0; i < w->n; i++)
                shoal_adm_leave(&w->a, &w->f[i].ent);
        assert_int_equal(w->a.npreauth, 0);
        for (unsigned i = 0; i < SHOAL_ADM_BUCKETS; i++)
                assert_null(w->a.src[i]);
}

static void test_own_source_cycles(void **state)
{
        struct world w;
        world_init(&w, 100, 2);
        bool ev;
        struct fake *a1 = connect_from(&w, "10.0.0.1", false, &ev);
        struct fake *a2 = connect_from(&w, "10.0.0.1", true, &ev);
        assert_non_null(a1);
        assert_non_null(a2);
        assert_false(ev);
        /* At its own limit: the oldest silent one gives way, not the one that spoke. */
        struct fake *a3 = connect_from(&w, "10.0.0.1", false, &ev);
        assert_non_null(a3);
        assert_true(ev);
        assert_false(a1->evicted);
        assert_true(a2->evicted);
        /* None silent: the oldest. */
        struct fake *a4 = connect_from(&w, "10.0.0.1", false, &ev);
        assert_non_null(a4);
        assert_true(ev);
        assert_true(a1->evicted);
        /* Another source is not touched by this one's limit. */
        assert_non_null(connect_from(&w, "10.0.0.2", false, &ev));
        assert_false(ev);
        world_clear(&w);
}

static void test_loopback_is_one_source(void **state)
{
        struct world w;
        world_init(&w, 100, 2);
        bool ev;
        struct fake *a = connect_from(&w, "127.0.0.1", true, &ev);
        assert_non_null(connect_from(&w, "127.0.0.2", false, &ev));
        assert_non_null(connect_from(&w, "127.9.9.9", false, &ev));
        assert_true(ev);
        assert_true(a->evicted);
        world_clear(&w);
}

static void test_full_only_heavier_gives_way(void **state)
{
        struct world w;
        world_init(&w, 4, 10);
        bool ev;
        struct fake *h1 = connect_from(&w, "10.0.0.1", false, &ev);
        connect_from(&w, "10.0.0.1", false, &ev);
        connect_from(&w, "10.0.0.1", false, &ev);
        connect_from(&w, "10.0.0.2", false, &ev);
        assert_int_equal(w.a.npreauth, 4);
        /* A new source: the heaviest (3 > 0 + 1) gives its oldest. */
        assert_non_null(connect_from(&w, "10.0.0.3", false, &ev));
        assert_true(ev);
        assert_true(h1->evicted);
        /* Now 2, 1, 1: a newcomer from a source with 1 does not push out a source of 2. */
        assert_null(connect_from(&w, "10.0.0.2", false, &ev));
        assert_int_equal(w.a.npreauth, 4);
        /* The heaviest source itself may cycle its own. */
        assert_non_null(connect_from(&w, "10.0.0.1", false, &ev));
        assert_true(ev);
        world_clear(&w);
}

static void test_limits_in_bounds(void **state)
{
        struct shoal_server_limits l = {.max_inflight = 2048};
        shoal_adm_limits_derive(&l, 4, false);
        assert_int_equal(l.npipes, 1);
        assert_true(l.max_inflight >= 8 && l.max_inflight <= 2048);
        assert_true(l.conn_cap >= 8 && l.conn_cap <= 10000);
        assert_true(l.loop_preauth_cap >= 4);
        assert_true(l.loop_preauth_per_src >= 2);
        struct shoal_server_limits sp = {.max_inflight = 16};
        shoal_adm_limits_derive(&sp, 1, true);
        assert_true(sp.npipes >= 2 && sp.npipes <= 64);
        assert_true(sp.max_inflight <= 16);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_own_source_cycles),
                cmocka_unit_test(test_loopback_is_one_source),
                cmocka_unit_test(test_full_only_heavier_gives_way),
                cmocka_unit_test(test_limits_in_bounds),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
