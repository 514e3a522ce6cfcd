/* vf_admit.c — admission and preemption: queued requests enter the active
 * set while the KV pool can hold their prompts, and before a step the
 * requests admitted last give their KV back when the pool is short (see
 * vf_server_impl.h). */
#include "vf_server_impl.h"

/* Blocks still owed to admitted requests that are prefilling. */
int sd_vfs_promised_blocks(const sd_vf_server *s)
{
    int sum = 0;
    for (int i = 0; i < s->n_active; i++) {
        const sd_req *r = s->active[i]->slot.r;
        if (!sd_req_prefilling(r)) continue;
        int need = sd_kv_blocks_for(s->pool, r->n_tokens + 1) - r->kv.n_blocks;
        if (need > 0) sum += need;
    }
    return sum;
}

/* KV blocks the next step of r takes beyond those it owns: its next prompt
 * chunk, or one decode position (drafts are dropped first when KV is short). */
static int step_blocks(const sd_vf_server *s, const sd_req *r)
{
    if (r->finish != SD_FINISH_NONE) return 0;
    int len = r->kv.len;
    if (sd_req_prefilling(r)) {
        int chunk = r->prefill_to - r->n_prefilled;
        len += chunk < s->cfg->prefill_chunk ? chunk : s->cfg->prefill_chunk;
    } else {
        len += 1;
    }
    int need = sd_kv_blocks_for(s->pool, len) - r->kv.n_blocks;
    return need > 0 ? need : 0;
}

/* Before a step: when the KV pool cannot hold what the active requests'
 * next step takes, the requests admitted last give theirs back
 * (sd_req_preempt) and wait at the head of the queue, to prefill again and
 * go on when there is room — instead of a request failing mid-stream. The
 * oldest request is never preempted: it has the pool to itself at worst. */
void sd_vfs_preempt_for_kv(sd_vf_server *s)
{
    for (;;) {
        int need = 0;
        for (int i = 0; i < s->n_active; i++) need += step_blocks(s, s->active[i]->slot.r);
        if (need <= sd_kv_pool_free_count(s->pool) || s->n_active <= 1) return;
        vf_req *vr = s->active[--s->n_active];
        sd_req_preempt(s->e, vr->slot.r);
        memmove(s->queue + 1, s->queue, (size_t)s->n_queue * sizeof *s->queue);
        s->queue[0] = vr;
        s->n_queue++;
        s->preemptions++;
        SD_DEBUG("request %llu preempted: the KV pool is short (%d blocks needed, %d free)",
                 (unsigned long long)vr->rid, need, sd_kv_pool_free_count(s->pool));
    }
}

/* Moves queued requests into the active set, oldest first, while the KV pool
 * can hold their prompts (beyond what admitted prompts still need). */
void sd_vfs_admit(sd_vf_server *s)
{
    while (s->n_queue > 0 && s->n_active < s->cfg->max_batch) {
        vf_req *vr = s->queue[0];
        const sd_req *r = vr->slot.r;
        int need = sd_kv_blocks_for(s->pool, r->n_tokens + 1);
        if (need > sd_kv_pool_total(s->pool)) {
            sd_vfs_remove_at(s->queue, &s->n_queue, 0);
            sd_vfs_reject(s, &vr->peer, vr->rid, r->n_prompt, "kv_exhausted", "the prompt does not fit the KV pool");
            sd_vfs_req_destroy(s, vr);
            continue;
        }
        /* room for it, for what admitted prompts still need, and for the running requests' next step */
        int growth = 0;
        for (int i = 0; i < s->n_active; i++)
            if (!sd_req_prefilling(s->active[i]->slot.r)) growth += step_blocks(s, s->active[i]->slot.r);
        if (!sd_engine_can_admit(s->e, r) || need + sd_vfs_promised_blocks(s) + growth > sd_kv_pool_free_count(s->pool))
            break;
        sd_vfs_remove_at(s->queue, &s->n_queue, 0);
        s->active[s->n_active++] = vr;
        SD_DEBUG("request %llu admitted (%d active)", (unsigned long long)vr->rid, s->n_active);
    }
}
