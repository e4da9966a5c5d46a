M=/work/main/models/smollm2-135m-instruct
for pol in dense mac cs; do for n in 2 34; do
/work/main/build/skim generate -m $M -f p4k.txt --ctx 4500 -n $n --ignore-eos --policy $pol --json -t 2 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print('$pol', 'n=$n', j['prompt_tokens'], 'prefill_s %.2f decode_s %.2f'%(j['prefill_seconds'], j['decode_seconds']))"
done; done
