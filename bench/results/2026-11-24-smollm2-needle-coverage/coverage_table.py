import json,sys
d=json.load(open(sys.argv[1]))
for p in d['policies']:
    cov=p.get('needle_coverage')
    if not cov: continue
    print(p['policy'])
    for which in ('found','lost'):
        L=cov[which]
        if not L: continue
        print(f"  {which}: steps/layer={L[0]['steps']}")
        print("   layer needle_mass needle_kept mass_kept top_needle top_kept")
        for i,l in enumerate(L):
            print(f"   {i:3d} {l['needle_mass']:.4f} {l['needle_kept']:.3f} {l['mass_kept']:.3f} {l['top_head_needle_mass']:.3f} {l['top_head_needle_kept']:.3f}")
