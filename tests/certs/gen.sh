#!/bin/sh
# Regenerates the transport test PKI. Run once; the outputs are committed so
# tests never depend on openssl at run time. Everything is ECDSA P-256
# (fast handshakes) and valid for ~100 years.
#
#   ca.crt / ca.key                 test CA ("agentloop test CA")
#   server.crt / server.key         localhost, 127.0.0.1, ::1 (SAN), by ca
#   wronghost.crt / wronghost.key   wrong.example.com only, by ca
#   other-ca.crt / other-ca.key     a second CA the tests never trust
#   unknown.crt / unknown.key       localhost + 127.0.0.1, by other-ca
#   expired.crt / expired.key       localhost + 127.0.0.1, by ca, valid only
#                                   in 2020 (openssl ca with explicit dates)
set -eu
cd "$(dirname "$0")"
DAYS=36500

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

ca() { # name cn
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days $DAYS -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$1.crt"
}

leaf() { # name cn san ca
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$4.crt" -CAkey "$4.key" -CAcreateserial \
    -sha256 -days $DAYS -extfile "$1.ext" -out "$1.crt"
  rm -f "$1.csr" "$1.ext"
}

ca ca "agentloop test CA"
ca other-ca "agentloop unknown CA"
leaf server localhost "DNS:localhost,IP:127.0.0.1,IP:::1" ca
leaf wronghost wrong.example.com "DNS:wrong.example.com" ca
leaf unknown localhost "DNS:localhost,IP:127.0.0.1" other-ca

# Expired: `openssl x509 -req` cannot set dates in the past; `openssl ca` can.
t=$(mktemp -d)
mkdir "$t/new" && touch "$t/index.txt" && echo 01 > "$t/serial"
printf '[ca]\ndefault_ca=c\n[c]\ndatabase=%s/index.txt\nnew_certs_dir=%s/new\nserial=%s/serial\ndefault_md=sha256\npolicy=p\ncopy_extensions=copy\n[p]\ncommonName=supplied\n' "$t" "$t" "$t" > "$t/ca.cnf"
key expired.key
openssl req -new -key expired.key -subj "/CN=localhost" \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -addext "basicConstraints=CA:FALSE" \
  -addext "keyUsage=critical,digitalSignature" \
  -addext "extendedKeyUsage=serverAuth" -out "$t/expired.csr"
openssl ca -batch -notext -config "$t/ca.cnf" -cert ca.crt -keyfile ca.key \
  -in "$t/expired.csr" -startdate 20200101000000Z -enddate 20210101000000Z \
  -out expired.crt
rm -rf "$t"
rm -f ./*.srl
