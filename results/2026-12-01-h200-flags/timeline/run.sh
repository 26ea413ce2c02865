tar xzf bundle-variants.tgz; o=$OUT/tl; mkdir -p $o
for m in decode mtp3 dflash7; do
  RGDN_LS_TIMELINE=$o/$m.bin timeout 100 variants/rgdn-tl bench --quick --no-progress --fusions default --modes $m --graph-layers 0 --out $o/b-$m > $o/b-$m.txt 2>&1; echo "$m exit $?"; grep "chain total" $o/b-$m.txt
done
rm -rf $o/b-*/
