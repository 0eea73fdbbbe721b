# `execbox serve`: capabilities over HTTP, replicas sharing PostgreSQL (deploy/k8s/serve/).
# Build from the repository root:
#   docker build -f deploy/serve.Dockerfile -t execbox-serve:dev .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p execbox-cli \
    && cp target/release/execbox /execbox \
    && strip /execbox

# `execbox serve`: the same distroless base; its runners are `execbox runner` processes of
# the same binary, locked down as the runner image's are.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /execbox /usr/local/bin/execbox
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/execbox"]
CMD ["serve", "--listen", "0.0.0.0:8080"]

