# Sourced by the measurement scripts here. wait_for_url URL TRIES PAUSE [-f] polls URL until
# it answers — with -f, until it answers 2xx — at most TRIES times PAUSE seconds apart; false
# if it never does.
wait_for_url() {
  local url=$1 tries=$2 pause=$3 fail=${4:-}
  for _ in $(seq "$tries"); do
    curl -s $fail -o /dev/null "$url" && return 0
    sleep "$pause"
  done
  return 1
}
