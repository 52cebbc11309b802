# Builds the postback binary and runs it on a slim Debian.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY lua lua
COPY config config
COPY ui ui
RUN cargo build --release --locked --bin postback

FROM debian:bookworm-slim
# curl answers the healthcheck (`/readyz`: the store is reachable).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/postback /usr/local/bin/postback
COPY config/postback.toml /etc/postback/postback.toml
# Without a Redis URL, notifications are kept in the embedded store here: mount a volume.
RUN mkdir -p /var/lib/postback && chown nobody /var/lib/postback
VOLUME /var/lib/postback
ENV POSTBACK_SERVER_LISTEN=0.0.0.0:8080 POSTBACK_STORE_DATA_DIR=/var/lib/postback
# No transparent huge pages for postback's heap, even on a host that sets them to
# `always` (they nearly double its peak memory: README, "Memory of postback itself").
ENV MIMALLOC_ALLOW_THP=0
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
USER nobody
ENTRYPOINT ["postback"]
CMD ["serve", "--config", "/etc/postback/postback.toml"]
