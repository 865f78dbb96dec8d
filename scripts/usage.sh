# Sourced by the bash scripts here: `-h`/`--help` as the first argument prints the script's header comment (its
# usage) and exits 0, before the script does anything; `refuse_arguments NAME ALLOWED ARG...` refuses what the
# script does not take with exit 2, so a mistyped flag never runs the script's real action (an install, a
# rewrite of the tree or of docs/deck.md).
script_help() {
  case "${2:-}" in
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
      exit 0
      ;;
  esac
}
refuse_arguments() {
  local name=$1 allowed=$2
  shift 2
  echo "$name: unexpected argument '$1' (allowed: $allowed; --help prints the usage)" >&2
  exit 2
}
