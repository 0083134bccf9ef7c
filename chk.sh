old=$(cat slot.pgid)
for st in /proc/[0-9]*/stat; do
  read -r line < "$st" 2>/dev/null || continue
  set -- ${line##*) }
  if [ "$1" != Z ] && [ "$3" = "$old" ]; then echo "OVERLAP $old"; break; fi
done
