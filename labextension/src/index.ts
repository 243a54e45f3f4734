/**
 * JupyterLab 4 extension of the parallelism planning workbench.
 *
 * - a launcher card and a command palette entry (command `parallelism-workbench:open`) that open the
 *   Panel app in a main-area tab: an iframe on the app that jupyter-server-proxy serves at
 *   `{base_url}parallelism-workbench/` (workbench_widgets.app.launcher);
 * - a viewer of `*.workbench.json` estimate files (workbench_widgets.workbench_file): an iframe on the
 *   HTML report that the server extension renders for the file
 *   (`{base_url}parallelism-workbench-api/report?path=...`, workbench_widgets.lab_server).
 *
 * The icon is widgets/app/icon.svg, bundled as text.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  IFrame,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import {
  ABCWidgetFactory,
  DocumentRegistry,
  DocumentWidget,
  IDocumentWidget
} from '@jupyterlab/docregistry';
import { ILauncher } from '@jupyterlab/launcher';
import { LabIcon } from '@jupyterlab/ui-components';

import iconSvg from '../../widgets/app/icon.svg';

/** The path jupyter-server-proxy serves the app under (launcher.PROXY_NAME), below the base URL. */
export const APP_PATH = 'parallelism-workbench/';
/** The server extension's report route (lab_server.REPORT_ROUTE), below the base URL. */
export const REPORT_PATH = 'parallelism-workbench-api/report';
export const COMMAND_OPEN = 'parallelism-workbench:open';
export const FILE_TYPE = 'parallelism-workbench-estimate';
export const FACTORY = 'Parallelism Workbench report';
const TITLE = 'Parallelism Workbench';

export const workbenchIcon = new LabIcon({
  name: 'parallelism-workbench:icon',
  svgstr: iconSvg
});

/** The proxied app's URL. */
export function appUrl(): string {
  return URLExt.join(PageConfig.getBaseUrl(), APP_PATH);
}

/** The report URL of a `.workbench.json` file, `path` relative to the contents root. */
export function reportUrl(path: string): string {
  return (
    URLExt.join(PageConfig.getBaseUrl(), REPORT_PATH) +
    URLExt.objectToQueryString({ path })
  );
}

function appWidget(): MainAreaWidget<IFrame> {
  // The app is served from the Lab's own origin through the proxy: it needs scripts, its session
  // websocket (same-origin cookies) and its download links.
  const content = new IFrame({
    sandbox: [
      'allow-same-origin',
      'allow-scripts',
      'allow-forms',
      'allow-downloads',
      'allow-popups',
      'allow-modals'
    ]
  });
  content.url = appUrl();
  content.addClass('jp-WorkbenchApp');
  const widget = new MainAreaWidget({ content });
  widget.id = 'parallelism-workbench-app';
  widget.title.label = TITLE;
  widget.title.icon = workbenchIcon;
  widget.title.closable = true;
  return widget;
}

/** Shows a `.workbench.json` file as its HTML report; reloads after the file changes. */
export class ReportFactory extends ABCWidgetFactory<IDocumentWidget<IFrame>> {
  protected createNewWidget(
    context: DocumentRegistry.Context
  ): IDocumentWidget<IFrame> {
    // Scripts only: the report (bokeh, inline) runs in an opaque origin, without the Lab's cookies.
    const content = new IFrame({ sandbox: ['allow-scripts'] });
    content.addClass('jp-WorkbenchReport');
    const widget = new DocumentWidget({ content, context });
    widget.title.icon = workbenchIcon;
    const load = (): void => {
      content.url = `${reportUrl(context.path)}&t=${Date.now()}`;
    };
    void context.ready.then(() => {
      load();
      context.fileChanged.connect(load);
      context.pathChanged.connect(load);
    });
    return widget;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'parallelism-workbench:plugin',
  description:
    'Parallelism Workbench: launcher card, command and *.workbench.json report viewer.',
  autoStart: true,
  optional: [ILauncher, ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    launcher: ILauncher | null,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ): void => {
    const tracker = new WidgetTracker<MainAreaWidget<IFrame>>({
      namespace: 'parallelism-workbench'
    });
    app.commands.addCommand(COMMAND_OPEN, {
      label: TITLE,
      caption: 'Open the Parallelism Workbench app in a tab',
      icon: args => (args['isPalette'] ? undefined : workbenchIcon),
      execute: () => {
        let widget = tracker.currentWidget;
        if (!widget || widget.isDisposed) {
          widget = appWidget();
          void tracker.add(widget);
          app.shell.add(widget, 'main');
        }
        app.shell.activateById(widget.id);
        return widget;
      }
    });
    if (restorer) {
      void restorer.restore(tracker, {
        command: COMMAND_OPEN,
        name: () => 'parallelism-workbench'
      });
    }
    launcher?.add({ command: COMMAND_OPEN, category: 'Other', rank: 0 });
    palette?.addItem({ command: COMMAND_OPEN, category: TITLE });

    app.docRegistry.addFileType({
      name: FILE_TYPE,
      displayName: 'Workbench estimate',
      extensions: ['.workbench.json'],
      mimeTypes: ['application/json'],
      contentType: 'file',
      fileFormat: 'text',
      icon: workbenchIcon
    });
    const factory = new ReportFactory({
      name: FACTORY,
      label: 'Workbench report',
      fileTypes: [FILE_TYPE],
      defaultFor: [FILE_TYPE],
      readOnly: true
    });
    app.docRegistry.addWidgetFactory(factory);
    const reports = new WidgetTracker<IDocumentWidget<IFrame>>({
      namespace: 'parallelism-workbench-report'
    });
    factory.widgetCreated.connect((_, widget) => {
      void reports.add(widget);
    });
    if (restorer) {
      void restorer.restore(reports, {
        command: 'docmanager:open',
        args: widget => ({ path: widget.context.path, factory: FACTORY }),
        name: widget => widget.context.path
      });
    }
  }
};

export default plugin;
