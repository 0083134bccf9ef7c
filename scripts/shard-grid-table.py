"""Prints the tables of scripts/bench-shard-grid.sh's runs: python3 scripts/shard-grid-table.py OUT"""
import json, glob, re, os, sys

d = sys.argv[1] if len(sys.argv) > 1 else '.'
rows=[]
order={'redis':0,'postgres':1,'etcd':2,'nats':3,'zk':4,'sqlite':5}
for f in glob.glob(os.path.join(d, '*.json')):
    m=re.match(r'.*/(\w+)_m(\d+)_n(\d+)_t(\w+)\.json',f)
    store,M,N,T=m.group(1),int(m.group(2)),int(m.group(3)),m.group(4)
    err=open(f[:-5]+'.err').read()
    try: b=json.load(open(f))
    except Exception:
        last=[l for l in err.strip().split('\n') if l and not l.startswith('exit')]
        why = last[-1] if last else err.strip()
        why = why[why.index('waited'):] if 'waited' in why else why
        rows.append((M,N,T,order[store],store,None,why)); continue
    rows.append((M,N,T,order[store],store,b,None))
rows.sort()
cur=None
for M,N,T,_,store,b,err in rows:
    if (M,N,T)!=cur:
        cur=(M,N,T)
        print(f"\n{N:,} shards over {M} members, term {T}:\n")
        print("| store | start | join | leave | crash (bound) | moved (minimum) join / leave / crash | lists / term | reads / term (records) | writes / term (records) | CPU / member (mean / max) | RSS / member (mean / max) | two at once |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    if b is None:
        print(f"| {store} | not balanced: {err} |||||||||||"); continue
    ev={r['event']:r for r in b['rows']}
    def t(e): 
        r=ev.get(e); return f"{r['balanced']['max_ms']/1000:.2f} s" if r else "—"
    def mv(e):
        r=ev.get(e); return f"{r['moved']} ({r['minimum']})" if r else "—"
    c=b['costs'][0] if b['costs'] else None
    s=b['stores'][0]
    two="never" if not s['overlaps'] else f"{len(s['overlaps'])} times"
    if s.get('skipped'): two="skipped: "+s['skipped']
    cost=(f"{c['lists']:.2f} | {c['reads']:.2f} ({c['read_items']:.1f}) | {c['writes']:.2f} ({c['write_items']:.1f}) | {c['cpu_mean']*100:.1f} % / {c['cpu_max']*100:.1f} % | {c['rss_mean_mb']:.0f} / {c['rss_max_mb']:.0f} MB" if c else "— | — | — | — | —")
    print(f"| {store} | {t('start')} | {t('join')} | {t('leave')} | {t('kill')} ({b['crash_bound_ms']/1000:.2f} s) | {mv('join')} / {mv('leave')} / {mv('kill')} | {cost} | {two} |")
