import json,sys
for f in sys.argv[1:]:
    d=json.load(open(f)); print(f, d.get('question'), d['seconds'])
    for p in d['policies']:
        n=p.get('needle',{}); c=t=0; per=[]
        for kind,bl in n.items():
            for l,cell in bl.items(): c+=cell['correct']; t+=cell['total']; per.append(f"{kind}{l}:{cell['correct']}/{cell['total']}")
        print(f"  {p['policy']:40s} {c}/{t}  {' '.join(per)}  kv={p['work']['kv_bytes_relative_to_dense']:.2f}")
