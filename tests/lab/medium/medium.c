/*
 * scanguard-lab medium: a userspace wireless medium for mac80211_hwsim (the lab's "air").
 *
 * Registers with hwsim's generic netlink family (HWSIM_CMD_REGISTER); from then on the kernel
 * hands every transmitted frame to this process (HWSIM_CMD_FRAME), and nothing reaches another
 * radio unless this process delivers it (HWSIM_CMD_FRAME to the receiver) and reports the
 * outcome to the transmitter (HWSIM_CMD_TX_INFO_FRAME: acked or not, tries per rate, signal).
 *
 *   - Airtime: one shared channel per frequency.  A transmission occupies it for its duration
 *     (preamble + payload at the frame's PHY rate, DIFS and random backoff, SIFS + ACK, per try;
 *     the contention window doubles on every retry).  Each radio has its own queue (its
 *     hardware queue); when the channel falls free, the radios with a frame waiting take
 *     turns (round robin), as DCF's random backoff gives contenders equal chances: an AP's
 *     TCP ACK or ping reply waits for about one of the station's frames, not for its queue.
 *   - Signal: a level in dBm per pair of radios (config file, re-read on SIGHUP).  Receivers get
 *     it as the frame's rx signal: what mac80211, wpa_supplicant's SignalPoll, bgscan and
 *     NetworkManager see.
 *   - Errors: per try, success falls with SNR on a logistic curve whose midpoint depends on the
 *     rate (and frame length), so that minstrel settles on a rate the signal supports.  The
 *     lab's radios decode one spatial stream: HT MCS 8-15 never succeed.
 *   - Off channel: a unicast frame for a radio that is listening on another channel (it is
 *     scanning: it last transmitted elsewhere) is not acked; the transmitter's rate control
 *     and retries see the failure, as on real hardware.
 *
 * Protocol reference: the kernel's drivers/net/wireless/mac80211_hwsim.[ch] (6.1 and 6.12).
 * Usage: medium CONFIG   (the format: load_config below; lab.py writes it; SIGHUP re-reads it;
 * a statistics line goes to stdout every second while frames flow).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

/* ---- the hwsim netlink ABI (include/uapi-like, from mac80211_hwsim.h) ---- */
enum { HWSIM_CMD_REGISTER = 1, HWSIM_CMD_FRAME = 2, HWSIM_CMD_TX_INFO_FRAME = 3 };
enum {
	HWSIM_ATTR_ADDR_RECEIVER = 1, HWSIM_ATTR_ADDR_TRANSMITTER = 2, HWSIM_ATTR_FRAME = 3,
	HWSIM_ATTR_FLAGS = 4, HWSIM_ATTR_RX_RATE = 5, HWSIM_ATTR_SIGNAL = 6, HWSIM_ATTR_TX_INFO = 7,
	HWSIM_ATTR_COOKIE = 8, HWSIM_ATTR_FREQ = 19, HWSIM_ATTR_PAD = 20,
	HWSIM_ATTR_TX_INFO_FLAGS = 21, HWSIM_ATTR_MAX_USED = 26
};
enum { TX_CTL_REQ_TX_STATUS = 1, TX_CTL_NO_ACK = 2, TX_STAT_ACK = 4 };
enum { RC_SHORT_PREAMBLE = 1 << 2, RC_MCS = 1 << 3, RC_40MHZ = 1 << 5, RC_SHORT_GI = 1 << 7,
       RC_VHT = 1 << 8 };
#define MAX_RATES 4
struct tx_rate { int8_t idx; uint8_t count; } __attribute__((packed));
struct tx_rate_flag { int8_t idx; uint16_t flags; } __attribute__((packed));

/* ---- configuration ---- */
#define MAX_RADIOS 8
struct radio {
	char name[64];
	uint8_t mac[6];   /* permanent address: the interface MAC (02:00:00:00:NN:00) */
	uint8_t hw[6];    /* hwsim's address for it on netlink (mac with 0x40 set in byte 0) */
	int last_freq;    /* where it last transmitted: where it listens (see transmit_due) */
};
static struct radio radios[MAX_RADIOS];
static int nradios;
static double sig[MAX_RADIOS][MAX_RADIOS];
static double default_signal = -50, noise = -91, airtime_scale = 1;
static const char *config_path;
static volatile sig_atomic_t reload_wanted, stop_wanted;

static int parse_mac(const char *s, uint8_t *mac)
{
	unsigned v[6];
	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
		return -1;
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)v[i];
	return 0;
}

/* Lines: "radio NAME MAC", "signal NAME NAME DBM" (both directions), "default_signal DBM",
 * "noise DBM", "airtime_scale F"; '#' starts a comment.  A bad line is reported and the old settings stay. */
static int load_config(void)
{
	FILE *f = fopen(config_path, "r");
	if (!f) {
		fprintf(stderr, "medium: cannot open %s: %s\n", config_path, strerror(errno));
		return -1;
	}
	struct radio nr[MAX_RADIOS];
	double ns[MAX_RADIOS][MAX_RADIOS];
	int n = 0, lineno = 0, bad = 0;
	double dsig = -50, nfl = -91, scale = 1;
	char line[256];
	int set[MAX_RADIOS][MAX_RADIOS] = {{0}};
	memset(nr, 0, sizeof(nr));
	while (fgets(line, sizeof(line), f)) {
		char a[64], b[64], c[64], d[64];
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		int k = sscanf(line, "%63s %63s %63s %63s", a, b, c, d);
		if (k <= 0)
			continue;
		if (!strcmp(a, "radio") && k == 3 && n < MAX_RADIOS) {
			snprintf(nr[n].name, sizeof(nr[n].name), "%s", b);
			if (parse_mac(c, nr[n].mac)) {
				bad = lineno;
				continue;
			}
			memcpy(nr[n].hw, nr[n].mac, 6);
			nr[n].hw[0] |= 0x40;
			n++;
		} else if (!strcmp(a, "signal") && k == 4) {
			int i = -1, j = -1;
			for (int r = 0; r < n; r++) {
				if (!strcmp(nr[r].name, b)) i = r;
				if (!strcmp(nr[r].name, c)) j = r;
			}
			char *end;
			double v = strtod(d, &end);
			if (i < 0 || j < 0 || *end) {
				bad = lineno;
				continue;
			}
			ns[i][j] = ns[j][i] = v;
			set[i][j] = set[j][i] = 1;
		} else if (!strcmp(a, "default_signal") && k == 2) {
			dsig = atof(b);
		} else if (!strcmp(a, "noise") && k == 2) {
			nfl = atof(b);
		} else if (!strcmp(a, "airtime_scale") && k == 2) {
			scale = atof(b);  /* 0: frames take no air (the medium's own benchmark) */
		} else {
			bad = lineno;
		}
	}
	fclose(f);
	if (bad) {
		fprintf(stderr, "medium: %s line %d: not understood; keeping the old settings\n",
			config_path, bad);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < n; j++)
			ns[i][j] = set[i][j] ? ns[i][j] : dsig;
	}
	memcpy(radios, nr, sizeof(nr));
	memcpy(sig, ns, sizeof(ns));
	nradios = n;
	default_signal = dsig;
	noise = nfl;
	airtime_scale = scale;
	printf("medium: config %s: %d radios, noise %.0f dBm, airtime x%g", config_path, n, noise,
	       airtime_scale);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			printf(", %s-%s %.0f dBm", radios[i].name, radios[j].name, sig[i][j]);
	printf("\n");
	fflush(stdout);
	return 0;
}

static int radio_by_hw(const uint8_t *hw)
{
	for (int i = 0; i < nradios; i++)
		if (!memcmp(radios[i].hw, hw, 6))
			return i;
	return -1;
}

static int radio_by_mac(const uint8_t *mac)
{
	for (int i = 0; i < nradios; i++)
		if (!memcmp(radios[i].mac, mac, 6))
			return i;
	return -1;
}

/* ---- PHY: durations (µs) and the error model ---- */
static const double legacy_mbps[] = {1, 2, 5.5, 11, 6, 9, 12, 18, 24, 36, 48, 54};
static const double legacy_snr[] = {0, 2, 5, 8, 5, 6, 8, 10, 13, 17, 21, 23};
static const int ht_ndbps[] = {26, 52, 78, 104, 156, 208, 234, 260};
static const double ht_snr[] = {5, 8, 10.5, 13, 17, 21, 23, 25};

#define SLOT 9.0
#define SIFS 10.0
#define DIFS (SIFS + 2 * SLOT)
#define ACK_US 34.0          /* 14 bytes at 24 Mbit/s OFDM: 20 µs preamble + 2 symbols + 6 */
#define ACK_TIMEOUT_US 50.0

struct phy { int ok; double us; double snr_needed; int legacy_idx; };

static struct phy phy_of(const struct tx_rate *r, uint16_t flags, int len, int freq)
{
	struct phy p = {0, 0, 0, 0};
	if (r->idx < 0)
		return p;
	if (flags & RC_VHT)
		return p;  /* 2.4 GHz HT lab: no VHT */
	if (flags & RC_MCS) {
		int mcs = r->idx, streams = mcs / 8 + 1;
		if (mcs > 31)
			return p;
		double ndbps = ht_ndbps[mcs % 8] * streams * ((flags & RC_40MHZ) ? 54.0 / 26 : 1);
		double sym = (flags & RC_SHORT_GI) ? 3.6 : 4.0;
		double nsym = ceil((16 + 8.0 * len + 6) / ndbps);
		p.ok = 1;
		p.us = 32 + 4 * streams + nsym * sym + 6;  /* HT-mixed preamble, signal extension */
		/* one spatial stream: 2-stream MCS never decode (snr_needed out of reach) */
		p.snr_needed = streams > 1 ? 1e9 : ht_snr[mcs % 8] + ((flags & RC_40MHZ) ? 3 : 0)
			+ ((flags & RC_SHORT_GI) ? 1 : 0);
		p.legacy_idx = 4 + (mcs % 8 < 7 ? mcs % 8 : 7);
		return p;
	}
	int idx = r->idx + (freq > 4000 ? 4 : 0);
	if (idx > 11)
		return p;
	double mbps = legacy_mbps[idx];
	p.ok = 1;
	p.legacy_idx = r->idx;
	p.snr_needed = legacy_snr[idx];
	if (idx < 4)
		p.us = ((flags & RC_SHORT_PREAMBLE) && idx ? 96 : 192) + 8.0 * len / mbps;
	else
		p.us = 20 + 4 * ceil((16 + 8.0 * len + 6) / (4 * mbps)) + (freq < 4000 ? 6 : 0);
	return p;
}

static double uniform(void) { return (double)random() / ((double)RAND_MAX + 1); }

static double success_prob(double snr, double needed, int len)
{
	double p1500 = 1.0 / (1.0 + exp(-(snr - needed) * 1.2));
	double scale = (len < 100 ? 100 : len) / 1500.0;
	return pow(p1500, scale);
}

/* ---- the air: frames waiting for their end of transmission ---- */
struct frame {
	struct frame *next;
	double arrived, air;    /* µs, CLOCK_MONOTONIC; airtime of all its tries */
	double end;             /* when its transmission ends (set when it takes the air) */
	int tx, rx;             /* radio indices; rx -1 = broadcast / unknown receiver */
	int freq, len, acked_by_model, legacy_idx;
	uint32_t flags;
	uint64_t cookie;
	double signal;
	struct tx_rate rates[MAX_RATES];
	uint8_t data[];
};

#define MAX_CHANNELS 64
static struct {
	int freq;
	double free_at;                 /* end of the last transmission */
	struct frame *on_air;           /* the transmission in progress, or NULL */
	struct frame *head[MAX_RADIOS], *tail[MAX_RADIOS];  /* each radio's queue */
	int last_tx;                    /* the radio that transmitted last (round robin) */
	double busy_us;
} chans[MAX_CHANNELS];
static int nchans;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int chan_of(int freq)
{
	for (int i = 0; i < nchans; i++)
		if (chans[i].freq == freq)
			return i;
	if (nchans == MAX_CHANNELS)
		return 0;
	memset(&chans[nchans], 0, sizeof(chans[nchans]));
	chans[nchans].freq = freq;
	return nchans++;
}

/* ---- statistics, one line a second while there is traffic ---- */
static struct {
	uint64_t frames, delivered, acked, failed, offchannel, late;
	double lateness_us, max_lateness_us;
	double wait_us, max_wait_us;  /* how long each frame waited for the air (the air's queue) */
} st, st_last;
static double st_t0;

static void stats_tick(double now)
{
	if (now - st_t0 < 1e6)
		return;
	double dt = (now - st_t0) / 1e6;
	uint64_t nf = st.frames - st_last.frames;
	if (nf) {
		struct timespec wall;
		clock_gettime(CLOCK_REALTIME, &wall);
		printf("medium: stats t=%.3f dt=%.3f frames=%llu fps=%.0f delivered=%llu acked=%llu "
		       "failed=%llu offchannel=%llu late=%llu mean_late_us=%.0f max_late_us=%.0f "
		       "mean_wait_us=%.0f max_wait_us=%.0f",
		       wall.tv_sec + wall.tv_nsec / 1e9, dt, (unsigned long long)nf, nf / dt,
		       (unsigned long long)(st.delivered - st_last.delivered),
		       (unsigned long long)(st.acked - st_last.acked),
		       (unsigned long long)(st.failed - st_last.failed),
		       (unsigned long long)(st.offchannel - st_last.offchannel),
		       (unsigned long long)(st.late - st_last.late),
		       st.late > st_last.late ? (st.lateness_us - st_last.lateness_us) /
			       (st.late - st_last.late) : 0.0, st.max_lateness_us,
		       (st.wait_us - st_last.wait_us) / nf, st.max_wait_us);
		for (int c = 0; c < nchans; c++)
			if (chans[c].busy_us > 0)
				printf(" busy_%d=%.3f", chans[c].freq, chans[c].busy_us / (now - st_t0));
		printf("\n");
		fflush(stdout);
	}
	for (int c = 0; c < nchans; c++)
		chans[c].busy_us = 0;
	st_last = st;
	st.max_lateness_us = 0;
	st.max_wait_us = 0;
	st_t0 = now;
}

/* ---- netlink ---- */
static struct nl_sock *sk;
static int family;

static struct nla_policy policy[HWSIM_ATTR_MAX_USED + 1];

/* Send one message now, asking the kernel for an ack; returns its sequence number. */
static int send_msg_acked(struct nl_msg *msg)
{
	nlmsg_hdr(msg)->nlmsg_flags |= NLM_F_ACK;
	int r = nl_send_auto(sk, msg);
	int seq = nlmsg_hdr(msg)->nlmsg_seq;
	nlmsg_free(msg);
	return r < 0 ? r : seq;
}

static void handle_frame_from_kernel(struct nlattr **a, double now);
static int acks_wanted_seq = -1, ack_error;


/* Read what the kernel has queued: frames go into the air, our ack is matched.  block: wait
 * until the ack for acks_wanted_seq has come (the kernel queues it during our send). */
static void handle_message(struct nlmsghdr *h, int len, double now, int *got_ack)
{
	for (; nlmsg_ok(h, len); h = nlmsg_next(h, &len)) {
		if (h->nlmsg_type == NLMSG_ERROR) {
			struct nlmsgerr *e = nlmsg_data(h);
			if ((int)h->nlmsg_seq == acks_wanted_seq) {
				ack_error = e->error;
				*got_ack = 1;
			}
			continue;
		}
		if (h->nlmsg_type != family)
			continue;
		struct nlattr *a[HWSIM_ATTR_MAX_USED + 1];
		struct genlmsghdr *g = nlmsg_data(h);
		if (g->cmd != HWSIM_CMD_FRAME)
			continue;
		if (genlmsg_parse(h, 0, a, HWSIM_ATTR_MAX_USED, policy) < 0)
			continue;
		handle_frame_from_kernel(a, now);
	}
}

/* Read what the kernel has queued, up to VLEN messages per system call (recvmmsg): frames go
 * into the air, our ack is matched.  block: wait until the ack for acks_wanted_seq came. */
#define VLEN 32
#define MSG_BUF 16384
static void read_socket(int block)
{
	static unsigned char bufs[VLEN][MSG_BUF];
	struct mmsghdr mm[VLEN];
	struct iovec iov[VLEN];
	int got_ack = 0;
	for (;;) {
		if (block && got_ack)
			return;
		memset(mm, 0, sizeof(mm));
		for (int i = 0; i < VLEN; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = MSG_BUF;
			mm[i].msg_hdr.msg_iov = &iov[i];
			mm[i].msg_hdr.msg_iovlen = 1;
		}
		int n = recvmmsg(nl_socket_get_fd(sk), mm, VLEN, block ? MSG_WAITFORONE : MSG_DONTWAIT,
				 NULL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == ENOBUFS) {
				fprintf(stderr, "medium: netlink receive buffer overrun (frames lost)\n");
				continue;
			}
			perror("medium: recvmmsg");
			exit(1);
		}
		double now = now_us();
		for (int i = 0; i < n; i++)
			handle_message((struct nlmsghdr *)bufs[i], (int)mm[i].msg_len, now, &got_ack);
		if (!block && n < VLEN)
			return;
	}
}

/* The channel fell free (at free_at) or a frame came to an idle one: the next transmission.
 * Contenders are the radios whose first frame had arrived when the channel could start
 * again; they take turns after the radio that sent last. */
static void take_air(int c)
{
	double earliest = -1;
	for (int r = 0; r < MAX_RADIOS; r++)
		if (chans[c].head[r] && (earliest < 0 || chans[c].head[r]->arrived < earliest))
			earliest = chans[c].head[r]->arrived;
	if (earliest < 0)
		return;
	double start = chans[c].free_at > earliest ? chans[c].free_at : earliest;
	int pick = -1;
	for (int k = 1; k <= MAX_RADIOS && pick < 0; k++) {
		int r = (chans[c].last_tx + k) % MAX_RADIOS;
		if (chans[c].head[r] && chans[c].head[r]->arrived <= start)
			pick = r;
	}
	struct frame *f = chans[c].head[pick];
	chans[c].head[pick] = f->next;
	if (!chans[c].head[pick])
		chans[c].tail[pick] = NULL;
	f->next = NULL;
	st.wait_us += start - f->arrived;
	if (start - f->arrived > st.max_wait_us)
		st.max_wait_us = start - f->arrived;
	f->end = start + f->air;
	chans[c].free_at = f->end;
	chans[c].busy_us += f->air;
	chans[c].on_air = f;
	chans[c].last_tx = pick;
}

static void handle_frame_from_kernel(struct nlattr **a, double now)
{
	if (!a[HWSIM_ATTR_ADDR_TRANSMITTER] || !a[HWSIM_ATTR_FRAME] || !a[HWSIM_ATTR_FLAGS] ||
	    !a[HWSIM_ATTR_TX_INFO] || !a[HWSIM_ATTR_COOKIE])
		return;
	int len = nla_len(a[HWSIM_ATTR_FRAME]);
	if (len < 10)
		return;
	const uint8_t *data = nla_data(a[HWSIM_ATTR_FRAME]);
	const uint8_t *hw = nla_data(a[HWSIM_ATTR_ADDR_TRANSMITTER]);
	int tx = radio_by_hw(hw);
	st.frames++;
	if (tx < 0) {
		/* a radio the config does not name: it joins at the default signal */
		if (nradios == MAX_RADIOS)
			return;
		tx = nradios++;
		memset(&radios[tx], 0, sizeof(radios[tx]));
		snprintf(radios[tx].name, sizeof(radios[tx].name), "auto%d", tx);
		memcpy(radios[tx].hw, hw, 6);
		memcpy(radios[tx].mac, hw, 6);
		radios[tx].mac[0] &= (uint8_t)~0x40;
		for (int r = 0; r < MAX_RADIOS; r++)
			sig[tx][r] = sig[r][tx] = default_signal;
		printf("medium: new radio %s (not in the config), at %.0f dBm\n",
		       radios[tx].name, default_signal);
		fflush(stdout);
	}
	struct frame *f = calloc(1, sizeof(*f) + len);
	if (!f)
		return;
	f->tx = tx;
	f->len = len;
	memcpy(f->data, data, len);
	f->flags = nla_get_u32(a[HWSIM_ATTR_FLAGS]);
	f->cookie = nla_get_u64(a[HWSIM_ATTR_COOKIE]);
	f->freq = a[HWSIM_ATTR_FREQ] ? (int)nla_get_u32(a[HWSIM_ATTR_FREQ]) : 2437;
	radios[tx].last_freq = f->freq;
	memcpy(f->rates, nla_data(a[HWSIM_ATTR_TX_INFO]), sizeof(f->rates));
	struct tx_rate_flag rf[MAX_RATES];
	memset(rf, 0, sizeof(rf));
	if (a[HWSIM_ATTR_TX_INFO_FLAGS] && nla_len(a[HWSIM_ATTR_TX_INFO_FLAGS]) >= (int)sizeof(rf))
		memcpy(rf, nla_data(a[HWSIM_ATTR_TX_INFO_FLAGS]), sizeof(rf));

	const uint8_t *addr1 = data + 4;
	int group = addr1[0] & 1;
	f->rx = group ? -1 : radio_by_mac(addr1);
	int noack = group || (f->flags & TX_CTL_NO_ACK) || f->rx < 0;
	f->signal = f->rx >= 0 ? sig[tx][f->rx] : default_signal;
	double snr = f->signal - noise;

	/* Walk the rate table try by try: each try costs DIFS + backoff + the frame + SIFS +
	 * ACK (or the ACK timeout), and succeeds with the model's probability. */
	double air = 0;
	int cw = 15, done = 0;
	f->legacy_idx = 0;
	for (int i = 0; i < MAX_RATES && !done; i++) {
		struct phy p = phy_of(&f->rates[i], rf[i].flags, len, f->freq);
		if (!p.ok || f->rates[i].count == 0) {
			for (int j = i; j < MAX_RATES; j++) {
				f->rates[j].idx = -1;
				f->rates[j].count = 0;
			}
			break;
		}
		int tries = f->rates[i].count;
		for (int t = 1; t <= tries; t++) {
			air += DIFS + SLOT * (random() % (cw + 1)) + p.us;
			f->legacy_idx = p.legacy_idx;
			if (noack) {
				f->rates[i].count = t;
				done = 1;
				break;
			}
			if (uniform() < success_prob(snr, p.snr_needed, len)) {
				air += SIFS + ACK_US;
				f->rates[i].count = t;
				f->acked_by_model = 1;
				done = 1;
				break;
			}
			air += ACK_TIMEOUT_US;
			cw = cw * 2 + 1 > 1023 ? 1023 : cw * 2 + 1;
		}
		if (done)
			for (int j = i + 1; j < MAX_RATES; j++) {
				f->rates[j].idx = -1;
				f->rates[j].count = 0;
			}
	}
	if (!done)
		st.failed++;
	f->air = air * airtime_scale;
	f->arrived = now;
	int c = chan_of(f->freq);
	if (chans[c].tail[tx])
		chans[c].tail[tx]->next = f;
	else
		chans[c].head[tx] = f;
	chans[c].tail[tx] = f;
	if (!chans[c].on_air)
		take_air(c);
}

static struct nl_msg *new_msg(int cmd, int payload)
{
	struct nl_msg *m = nlmsg_alloc_size(payload + 256);
	if (!m)
		return NULL;
	if (!genlmsg_put(m, NL_AUTO_PORT, NL_AUTO_SEQ, family, 0, 0, cmd, 1)) {
		nlmsg_free(m);
		return NULL;
	}
	return m;
}

/* Messages to the kernel are batched: one sendmmsg() per pass over the air instead of a
 * sendmsg() each (in the TCG guest a system call costs tens of µs). */
#define OUTBOX 32
static struct nl_msg *outbox[OUTBOX];
static int nout;

static void flush_outbox(void)
{
	struct mmsghdr mm[OUTBOX];
	struct iovec iov[OUTBOX];
	struct sockaddr_nl dst = {.nl_family = AF_NETLINK};
	if (!nout)
		return;
	memset(mm, 0, sizeof(mm));
	for (int i = 0; i < nout; i++) {
		nl_complete_msg(sk, outbox[i]);
		iov[i].iov_base = nlmsg_hdr(outbox[i]);
		iov[i].iov_len = nlmsg_hdr(outbox[i])->nlmsg_len;
		mm[i].msg_hdr.msg_name = &dst;
		mm[i].msg_hdr.msg_namelen = sizeof(dst);
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	for (int done = 0; done < nout;) {
		int r = sendmmsg(nl_socket_get_fd(sk), mm + done, (unsigned)(nout - done), 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("medium: sendmmsg");
			break;
		}
		done += r;
	}
	for (int i = 0; i < nout; i++)
		nlmsg_free(outbox[i]);
	nout = 0;
}

static void queue_msg(struct nl_msg *m)
{
	outbox[nout++] = m;
	if (nout == OUTBOX)
		flush_outbox();
}

/* Deliver to one radio.  The kernel drops it if that radio is not on the frame's channel. */
static void deliver(struct frame *f, int rx)
{
	struct nl_msg *m = new_msg(HWSIM_CMD_FRAME, f->len);
	if (!m)
		return;
	nla_put(m, HWSIM_ATTR_ADDR_RECEIVER, 6, radios[rx].hw);
	nla_put(m, HWSIM_ATTR_FRAME, f->len, f->data);
	nla_put_u32(m, HWSIM_ATTR_RX_RATE, (uint32_t)f->legacy_idx);
	nla_put_u32(m, HWSIM_ATTR_SIGNAL, (uint32_t)(int32_t)lround(sig[f->tx][rx]));
	nla_put_u32(m, HWSIM_ATTR_FREQ, (uint32_t)f->freq);
	queue_msg(m);
}

static void report(struct frame *f, int acked)
{
	struct nl_msg *m = new_msg(HWSIM_CMD_TX_INFO_FRAME, 64);
	if (!m)
		return;
	uint32_t flags = f->flags & (TX_CTL_REQ_TX_STATUS | TX_CTL_NO_ACK);
	if (acked)
		flags |= TX_STAT_ACK;
	nla_put(m, HWSIM_ATTR_ADDR_TRANSMITTER, 6, radios[f->tx].hw);
	nla_put_u32(m, HWSIM_ATTR_FLAGS, flags);
	nla_put_u32(m, HWSIM_ATTR_SIGNAL, (uint32_t)(int32_t)lround(f->signal));
	nla_put(m, HWSIM_ATTR_TX_INFO, sizeof(f->rates), f->rates);
	nla_put_u64(m, HWSIM_ATTR_COOKIE, f->cookie);
	queue_msg(m);
}

static void transmit_due(double now)
{
	for (int c = 0; c < nchans; c++) {
		while (chans[c].on_air && chans[c].on_air->end <= now) {
			struct frame *f = chans[c].on_air;
			chans[c].on_air = NULL;
			take_air(c);
			double late = now - f->end;
			if (late > 1000) {
				st.late++;
				st.lateness_us += late;
			}
			if (late > st.max_lateness_us)
				st.max_lateness_us = late;
			int acked = 0;
			if (f->rx >= 0) {
				/* A radio listens where it last transmitted: a scanning station
				 * probes on each channel (or listens passively after a probe
				 * elsewhere) and announces its return with a Null frame on its
				 * own channel.  The kernel drops a frame for a radio that is
				 * elsewhere anyway; this decides the ACK without a round trip. */
				int away = radios[f->rx].last_freq &&
					radios[f->rx].last_freq != f->freq;
				if (away && f->acked_by_model) {
					st.offchannel++;
				} else if (f->acked_by_model || (f->flags & TX_CTL_NO_ACK)) {
					deliver(f, f->rx);
					acked = f->acked_by_model;
					st.delivered++;
				}
			} else {
				for (int r = 0; r < nradios; r++)
					if (r != f->tx && uniform() < success_prob(
						    sig[f->tx][r] - noise, 0, f->len)) {
						deliver(f, r);
						st.delivered++;
					}
				acked = 1;  /* group / no-ack frames: "transmitted" */
			}
			if (acked && f->rx >= 0)
				st.acked++;
			report(f, acked);
			free(f);
		}
	}
	flush_outbox();
}

static double next_due(void)
{
	double t = -1;
	for (int c = 0; c < nchans; c++)
		if (chans[c].on_air && (t < 0 || chans[c].on_air->end < t))
			t = chans[c].on_air->end;
	return t;
}

static void on_hup(int s) { (void)s; reload_wanted = 1; }
static void on_term(int s) { (void)s; stop_wanted = 1; }

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CONFIG\n  a wireless medium for mac80211_hwsim; "
			"SIGHUP re-reads CONFIG\n", argv[0]);
		return 2;
	}
	config_path = argv[1];
	if (load_config() < 0)
		return 1;
	/* The backoff draws follow a fixed seed, so that the lab in `make test` draws the same
	 * ones on every run; MEDIUM_SEED (a number) chooses another. */
	{
		const char *seed_text = getenv("MEDIUM_SEED");
		unsigned seed = seed_text && *seed_text ? (unsigned)strtoul(seed_text, NULL, 10) : 1u;
		srandom(seed);
		printf("random seed %u (MEDIUM_SEED)\n", seed);
	}
	policy[HWSIM_ATTR_ADDR_TRANSMITTER].type = NLA_UNSPEC;
	policy[HWSIM_ATTR_FRAME].type = NLA_UNSPEC;
	policy[HWSIM_ATTR_FLAGS].type = NLA_U32;
	policy[HWSIM_ATTR_FREQ].type = NLA_U32;
	policy[HWSIM_ATTR_COOKIE].type = NLA_U64;
	policy[HWSIM_ATTR_TX_INFO].type = NLA_UNSPEC;
	policy[HWSIM_ATTR_TX_INFO_FLAGS].type = NLA_UNSPEC;

	sk = nl_socket_alloc();
	if (!sk || genl_connect(sk) < 0) {
		fprintf(stderr, "medium: cannot open a generic netlink socket\n");
		return 1;
	}
	family = genl_ctrl_resolve(sk, "MAC80211_HWSIM");
	if (family < 0) {
		fprintf(stderr, "medium: generic netlink family MAC80211_HWSIM not found: "
			"is mac80211_hwsim loaded?\n");
		return 1;
	}
	nl_socket_disable_seq_check(sk);
	nl_socket_set_buffer_size(sk, 8 << 20, 8 << 20);
	struct nl_msg *m = new_msg(HWSIM_CMD_REGISTER, 0);
	int seq = send_msg_acked(m);
	acks_wanted_seq = seq;
	read_socket(1);
	acks_wanted_seq = -1;
	if (ack_error) {
		fprintf(stderr, "medium: HWSIM_CMD_REGISTER refused: %s (another medium running?)\n",
			strerror(-ack_error));
		return 1;
	}
	struct sched_param sp = {.sched_priority = 20};
	if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
		fprintf(stderr, "medium: SCHED_FIFO refused (%s): frames may be late under load\n",
			strerror(errno));
	signal(SIGHUP, on_hup);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	printf("medium: registered with mac80211_hwsim (family %d)\n", family);
	fflush(stdout);
	st_t0 = now_us();

	struct pollfd pfd = {.fd = nl_socket_get_fd(sk), .events = POLLIN};
	while (!stop_wanted) {
		if (reload_wanted) {
			reload_wanted = 0;
			load_config();
		}
		double now = now_us(), due = next_due();
		struct timespec ts = {1, 0}, *tsp = &ts;
		if (due >= 0) {
			double wait = due - now;
			if (wait < 0)
				wait = 0;
			ts.tv_sec = (time_t)(wait / 1e6);
			ts.tv_nsec = (long)((wait - ts.tv_sec * 1e6) * 1e3);
		}
		int r = ppoll(&pfd, 1, tsp, NULL);
		if (r < 0 && errno != EINTR) {
			perror("medium: ppoll");
			return 1;
		}
		if (r > 0)
			read_socket(0);
		now = now_us();
		transmit_due(now);
		stats_tick(now);
	}
	printf("medium: stopping (frames %llu)\n", (unsigned long long)st.frames);
	return 0;
}
